"""The CPU linear backend's timing (bench.models.forward_cost.measure_backends, as backend_choice.choose runs it:
1-16 tokens after 128 cached, 5 repeats interleaved) on the embedded model, alone and beside one busy loop, with
the cores' worth of CPU other processes took meanwhile (backend_choice.others_load).
Run from the repository root: PYTHONPATH=. python evidence/cpu_linear/vm_AMD_EPYC-20261201-intrusion/intrusion.py"""

import subprocess
import sys

import torch

from bench.core.machine import machine_id
from bench.models.backend_choice import SIZES, others_load
from bench.models.forward_cost import measure_backends
from bench.run.runner import get_bundle
from tests.conftest import compose_cfg

bundle = get_bundle(compose_cfg("model=smollm2-135m", "model.cpu_linear=plain").model, "data/cache/models")
for threads, beside in ((2, False), (2, True), (2, False), (1, False)):
    torch.set_num_threads(threads)
    loop = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if beside else None
    try:
        with others_load() as load:
            ms = measure_backends(bundle, ("plain", "onednn"), sizes=SIZES, prefix_tokens=128, reps=5)
    finally:
        if loop:
            loop.kill()
    print(f"{machine_id(bundle.device)}, {'beside one busy loop' if beside else 'alone'}: others took "
          f"{load['cores']:.2f} cores; ms at n = {', '.join(map(str, SIZES))}: "
          + "; ".join(f"{k} " + " ".join(f"{1000 * v[n]:.1f}" for n in SIZES) for k, v in ms.items()), flush=True)
