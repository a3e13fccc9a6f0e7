"""Every script loads as `python scripts/<name>.py` runs it, and answers --help with its usage and status 0.

The suite imports scripts as the `scripts` package (pytest puts the project root on sys.path), which a script run
by path does not have: draft_sweep.py imported `scripts.train_draft` and `make draft-sweep` failed at its first
line while every test passed. One subprocess loads them all with a script's own sys.path (its folder first, the
project root absent: the installed packages come from the editable install)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from bench.paths import PROJECT

SCRIPTS = PROJECT / "scripts"
# graph_probe.py and plot_gpu_curve.py run on a GPU node's bare python: they take argparse's own --help.
ARGPARSE = ("graph_probe.py", "plot_gpu_curve.py")

PROBE = r"""
import contextlib, io, json, runpy, sys
folder, names = sys.argv[1], sys.argv[2:]
sys.path[:] = [folder] + [p for p in sys.path[1:] if p not in ("", ".")]
status = {}
for name in names:
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            code = runpy.run_path(f"{folder}/{name}", run_name="probe")["main"](["--help"]) or 0
    except SystemExit as done:
        code = done.code or 0
    except Exception as err:
        code = f"{type(err).__name__}: {err}"
    status[name] = [code, "usage" in out.getvalue() or "python scripts/" in out.getvalue()]
print(json.dumps(status))
"""


def test_every_script_loads_by_path_and_answers_help():
    names = sorted(p.name for p in SCRIPTS.glob("*.py") if p.name not in ARGPARSE)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, "-c", PROBE, str(SCRIPTS), *names], cwd="/", capture_output=True,
                          text=True, env={**env, "OMP_NUM_THREADS": "1"}, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    status = json.loads(proc.stdout.strip().splitlines()[-1])
    assert status == {n: [0, True] for n in names}, {n: s for n, s in status.items() if s != [0, True]}


def test_run_script_turns_ctrl_c_and_an_unwritable_folder_into_one_line(capsys):
    import pytest

    from bench.cli import run_script

    def interrupted(argv):
        raise KeyboardInterrupt

    def blocked(argv):
        raise NotADirectoryError(20, "Not a directory", "/tmp/afile/heads")

    for main, code, text in ((interrupted, 130, "error: interrupted"), (blocked, 1, "error: [Errno 20] Not a directory"),
                             (lambda argv: 3, 3, None)):
        with pytest.raises(SystemExit) as done:
            run_script(main, [])
        err = capsys.readouterr().err.splitlines()
        assert done.value.code == code and (err == [] if text is None else len(err) == 1 and err[0].startswith(text))


BAD_RECIPES = [
    ("model.heads.train.max_minutes=-1", "model.heads.train.max_minutes must be a number > 0"),  # trained forever
    ("model.heads.train.batch_positions=0", "model.heads.train.batch_positions must be an integer >= 1"),
    ("model.heads.train.max_train_prompts=-1", "max_train_prompts must be an integer >= 0 or null"),  # all but one
    ("model.heads.train.lr=abc", "model.heads.train.lr must be a number > 0, got 'abc'"),
    ("model.heads.train.max_steps=0", "max_steps must be an integer >= 1 or null"),
    ("model.draft.vocab=0", "model.draft.vocab must be an integer >= 1 or null"),
    ("model.draft.sweep.layers=[]", "model.draft.sweep.layers must be a non-empty list"),
    ("model.eagle.train.cost_reps=0", "model.eagle.train.cost_reps must be an integer >= 1"),
    ("tree.calibration.limit=0", "tree.calibration.limit must be an integer >= 1"),
    ("model.heads.train.max_train_prompts=0", "max_train_prompts must be >= 1 or null"),  # torch.cat of nothing
]


def test_recipe_numbers_out_of_range_are_one_line():
    """What scripts/train_*.py, draft_sweep.py and calibrate_tree.py check on the config they compose (a zero or
    negative size divided by zero, trained forever or meant something else); every shipped config passes."""
    import pytest

    from bench.errors import HarnessError
    from bench.run.compose import compose_config
    from bench.train.recipes import check_recipes

    blocks = ("draft", "heads", "early_heads", "eagle", "eagle3", "tree.calibration")
    for override, message in BAD_RECIPES:
        with pytest.raises(HarnessError, match=message.replace("[", r"\[")):
            check_recipes(compose_config(["tree=built", override]), *blocks)
    for model in sorted(p.stem for p in (PROJECT / "conf" / "model").glob("*.yaml")):
        check_recipes(compose_config([f"model={model}", "tree=built"]), *blocks)
    for fine in ("model.heads.train.eval_positions=null", "model.draft.train.eval_every_minutes=null",
                 "model.heads.train.max_train_prompts=null", "model.heads.num_layers=0"):  # what the code reads so
        check_recipes(compose_config(["tree=built", fine]), *blocks)
    check_recipes(compose_config(["tree=built", "model.heads.train.lr=0"]), "tree.calibration")  # not its block
