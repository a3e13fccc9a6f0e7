"""A target split over two GPUs (issue 40, defects 1-3), on the CPU: tests/virtual_devices.py dispatches a tiny Llama
with accelerate over two virtual devices and raises where two of them meet in one op, as CUDA does.

AR, Medusa, EAGLE, EAGLE-2 and ProPD at batch 1, and at batch 2 those that batch, must decode on the split target without
meeting two devices and give greedy AR's tokens. On the code before the fix, the forward that keeps hidden states
called the decoder and lm_head past accelerate's top-level hook (logits and hidden states stayed on the last
device), the batched prefill indexed the last device's hidden state with a device-0 tensor, and ProPD's pruning ran
the last device's final norm on device-0 states."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from bench.core.engine import Engine
from bench.core.timing import PhaseTimer
from bench.models.eagle import EagleHead
from bench.models.heads import MedusaHeads
from methods import build_method
from tests.conftest import compose_cfg, tiny_llama
from tests.virtual_devices import DeviceMismatch, VirtualDevices, place_module, split_model

V = 64
NO_EOS = 10_000
NEW = 24
METHODS = {
    "ar": ("method=ar",),
    "medusa": ("method=medusa",),
    "eagle": ("method=eagle",),
    "eagle2": ("method=eagle2",),
    "propd": ("method=propd", "method.prune_layer=1", "method.prune_topk=8"),
}
BATCHED = ["ar", "medusa", "propd"]


def heads_for(model, n: int, seed: int, layers=None) -> MedusaHeads:
    torch.manual_seed(seed)
    heads = MedusaHeads(model.config.hidden_size, V, n, lm_head=model.get_output_embeddings())
    for block in heads.blocks:
        torch.nn.init.normal_(block[0].linear.weight, std=0.5)
    if layers is not None:
        heads.layers = layers
    return heads.eval()


def bundle_of(model, device) -> SimpleNamespace:
    """Heads and the EAGLE head on the input device (where the loaders put them), sharing the target's lm_head."""
    medusa, early = heads_for(model, 5, 1), heads_for(model, 1, 2, layers=[1])
    torch.manual_seed(3)
    eagle = EagleHead(model).eval()
    for m in (medusa, early, eagle):
        place_module(m, device.index)
    return SimpleNamespace(name="tiny", device=device, dtype=torch.float32, vocab_size=V, model=model,
                           eos_token_ids=[NO_EOS], max_context=512, load_heads=lambda: medusa,
                           load_early_heads=lambda: early, load_eagle=lambda: eagle)


def decode(bundle, overrides, prompts, batch_size):
    method = build_method(compose_cfg(*overrides).method, bundle)
    engine = Engine(bundle.model, bundle.eos_token_ids, bundle.max_context, device=bundle.device)
    out = []
    for i in range(0, len(prompts), batch_size):
        chunk = prompts[i : i + batch_size]
        gens = [torch.Generator().manual_seed(i + j) for j in range(len(chunk))]
        out += [g.output_ids for g in method.generate_batch(engine, chunk, NEW, PhaseTimer("cpu"), gens)]
    return out


@pytest.fixture(scope="module")
def references():
    g = torch.Generator().manual_seed(5)
    prompts = [torch.randint(0, V, (n,), generator=g).tolist() for n in (7, 12)]
    model = tiny_llama(V)
    bundle = bundle_of(model, torch.device("cpu"))
    return prompts, decode(bundle, METHODS["ar"], prompts, 1)


def split_bundle():
    model = tiny_llama(V)
    return bundle_of(model, split_model(model))


@pytest.mark.parametrize("batch_size", [1, 2])
@pytest.mark.parametrize("name", sorted(METHODS))
def test_split_target_decodes_greedy_ar(name, batch_size, references):
    if batch_size > 1 and name not in BATCHED:
        pytest.skip(f"{name} decodes one sequence at a time")
    prompts, refs = references
    with VirtualDevices():
        outputs = decode(split_bundle(), METHODS[name], prompts, batch_size)
    assert outputs == refs


def test_the_stand_in_catches_two_devices():
    """The stand-in is only worth its tests if it fails where CUDA would."""
    with VirtualDevices():
        a = torch.zeros(3, device=torch.device("cpu", 0))
        b = torch.ones(3, device=torch.device("cpu", 1))
        assert a.device == torch.device("cpu", 0) and (a + 1).device == a.device
        with pytest.raises(DeviceMismatch, match="cuda:0 and cuda:1"):
            a + b
        assert (a + b.to(a.device)).device == a.device
        host = torch.ones(3)
        assert (b * host).device == b.device  # host tensors mix with anything (checks are GPU against GPU)
        model = tiny_llama(V)
        device = split_model(model)
        ids = torch.tensor([[1, 2, 3]], device=device)
        assert model(input_ids=ids).logits.device == device  # the top-level hook returns outputs
        hidden = model.get_decoder()(input_ids=ids).last_hidden_state
        assert hidden.device == torch.device("cpu", 1)  # the decoder alone leaves them on the last device
        with pytest.raises(DeviceMismatch):
            hidden + torch.zeros(1, device=device)
