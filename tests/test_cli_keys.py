"""A key the config does not have is one `error:` line naming it and the keys beside it, before Hydra's main would
print its multi-line dump; sweeps are checked with each swept value's first option."""

from __future__ import annotations

import subprocess
import sys

import pytest

from bench.paths import PROJECT
from bench.run.precheck import PrecheckError, check_keys


@pytest.mark.parametrize("argv,named,beside", [
    (["run.limt=3"], "run.limt", "limit"),
    (["method=pld", "method.max_ngramm=2"], "method.max_ngramm", "max_ngram"),
    (["-m", "method=pld,ar", "run.max_new_token=8"], "run.max_new_token", "max_new_tokens"),
    (["experiment=token_recycling/fig3c", "method.topkk=4"], "method.topkk", "topk"),
])
def test_unknown_key_is_named_with_its_neighbours(argv, named, beside):
    with pytest.raises(PrecheckError, match=rf"unknown key '{named}' \(nearest: {beside}\b.*; known in [a-z]+: .*\b{beside}\b"):
        check_keys(argv)


@pytest.mark.parametrize("argv", [["run.limit=3"], ["+run.new_key=1"], ["-m", "method=pld,ar", "run.limit=1"],
                                  ["experiment=token_recycling/fig3c"]])
def test_known_and_added_keys_pass(argv):
    check_keys(argv)


def test_command_line_prints_one_error_line_and_exits_2():
    proc = subprocess.run([sys.executable, "-m", "bench.run", "run.limt=3"], cwd=PROJECT, capture_output=True, check=False,
                          text=True, timeout=120)
    assert proc.returncode == 2
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: unknown key 'run.limt'"), proc.stderr
