"""One run = model x dataset x method, measured with the Spec-Bench protocol.

    python -m bench.run model=smollm2-135m dataset=humaneval method=token_recycling run.limit=5

Protocol: `run.warmup` untimed passes of the first prompt (stateful methods keep what they learn, as in
Spec-Bench), then per prompt-turn a timed region of prefill + decode with device sync; tokenization is
outside. Each prompt-turn's output is compared with greedy AR (untimed, cached). Results are written to
results/runs/<run_id>/ only when the run completes; the last line printed is `results: <run dir>`.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import sys
import time
import zlib
from datetime import datetime
from pathlib import Path

import hydra
import torch
from omegaconf import DictConfig, OmegaConf
from tqdm import tqdm

from bench import metrics
from bench.engine import Engine
from bench.errors import HarnessError
from bench.models import load_model
from bench.prompts import prompt_ids
from bench.provenance import ROOT, provenance
from bench.reference import ReferenceStore
from bench.timing import PhaseTimer, device_sync
from data.loaders import DataError, load_selection
from methods import UnknownMethod, build_method
from methods.ar import Autoregressive

CONF = ROOT / "conf"
_BUNDLES: dict = {}  # model bundles reused across the jobs of one multirun process


def project_path(p: str) -> Path:
    p = Path(os.path.expanduser(str(p)))
    return p if p.is_absolute() else ROOT / p


def get_bundle(model_cfg, model_cache: str = "data/cache/models"):
    key = json.dumps(OmegaConf.to_container(model_cfg, resolve=True), sort_keys=True)
    if key not in _BUNDLES:
        _BUNDLES.clear()  # one model in memory at a time
        _BUNDLES[key] = load_model(model_cfg, str(project_path(model_cache)))
    return _BUNDLES[key]


def select_items(items: list[dict], run) -> list[dict]:
    """Limit first, then shuffle: a shuffled run measures the same questions in another order."""
    if run.limit_per_group is not None:
        seen: dict[str, int] = {}
        kept = []
        for it in items:
            seen[it["group"]] = seen.get(it["group"], 0) + 1
            if seen[it["group"]] <= run.limit_per_group:
                kept.append(it)
        items = kept
    if run.limit is not None:
        items = items[: run.limit]
    if run.shuffle:
        items = items[:]
        random.Random(run.seed).shuffle(items)
    return items


def run_id(cfg) -> str:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S-%f")
    variant = f"-{cfg.run.variant}" if cfg.run.variant else ""
    return f"{stamp}-{cfg.model.name}-{cfg.dataset.name}-{cfg.method.name}{variant}"


class Runner:
    def __init__(self, cfg):
        self.cfg = cfg
        items, self.selection = load_selection(
            cfg.dataset, str(project_path(cfg.paths.data_mirror)), str(project_path(cfg.paths.data_cache))
        )
        self.temperature = float(cfg.run.temperature)
        self.bundle = get_bundle(cfg.model, cfg.paths.model_cache)
        self.raw_tokens = cfg.dataset.get("raw_prompt_tokens")
        if self.raw_tokens:  # raw-text sets (DySpec/Sequoia): rows shorter than the prompt length are skipped
            kept = [it for it in items if len(self.raw_ids(it["turns"][0], full=True)) >= self.raw_tokens]
            if len(kept) < len(items):
                self.selection += f"; {len(items) - len(kept)} rows shorter than {self.raw_tokens} tokens skipped"
            items = kept
        self.items = select_items(items, cfg.run)
        if not self.items:
            raise HarnessError(f"dataset '{cfg.dataset.name}' selection is empty")
        self.method = build_method(cfg.method, self.bundle)
        b = self.bundle
        self.engine = Engine(b.model, b.eos_token_ids, b.max_context, temperature=self.temperature)
        self.timer = PhaseTimer(b.device, sync=cfg.run.sync_phases)
        ref_key = f"{b.name}-{str(b.dtype).replace('torch.', '')}-{b.device.type}"
        self.references = ReferenceStore(project_path(cfg.paths.results) / "cache" / "ar_reference", ref_key)
        # Sampled outputs cannot be compared with greedy AR; greedy AR at T=0 is the reference.
        self.is_reference = cfg.method.name == "ar" and self.temperature == 0

    def raw_ids(self, text: str, full: bool = False) -> list[int]:
        ids = self.bundle.tokenizer(text).input_ids
        return ids if full else ids[: self.raw_tokens]

    def encode(self, history, question) -> list[int]:
        if self.raw_tokens:
            ids = self.raw_ids(question)
        else:
            ids = prompt_ids(self.bundle.tokenizer, self.cfg.model.chat_template, history, question)
        # Room for the output and one draft beyond it (a static tree's size or a method's most draft nodes;
        # chains get a margin of 16).
        tree_size = getattr(getattr(self.method, "tree", None), "size", 0)
        draft_room = max(tree_size, getattr(self.method, "max_draft_tokens", 0), 16)
        if len(ids) + self.cfg.run.max_new_tokens + draft_room > self.bundle.max_context:
            raise HarnessError(
                f"prompt of {len(ids)} tokens plus {self.cfg.run.max_new_tokens} new tokens and {draft_room} "
                f"draft tokens exceeds the context of {self.bundle.max_context} tokens of model "
                f"'{self.bundle.name}'"
            )
        return ids

    def timed(self, ids):
        """Wall time of one generate call, synced at both ends; the method laps phases inside it."""
        device_sync(self.bundle.device)
        t0 = time.perf_counter()
        gen = self.method.generate(self.engine, ids, self.cfg.run.max_new_tokens, self.timer)
        device_sync(self.bundle.device)
        return gen, time.perf_counter() - t0

    def reference(self, ids, output):
        if not self.cfg.run.check_lossless or self.temperature > 0:
            return None
        max_new = self.cfg.run.max_new_tokens
        if self.is_reference:
            self.references.put(ids, max_new, output)
            return {"equal": True, "first_divergence": None, "reference": "self"}
        ref = self.references.get(ids, max_new)
        if ref is None:
            quiet = PhaseTimer(self.bundle.device, sync=False)
            ref = self.engine.generate(Autoregressive(None, self.bundle), ids, max_new, quiet).output_ids
            self.references.put(ids, max_new, ref)
        div = metrics.first_divergence(output, ref)
        return {"equal": div is None, "first_divergence": div, "reference": "ar"}

    def run_item(self, item, records=None):
        history: list[tuple[str, str]] = []
        tok = self.bundle.tokenizer
        for turn, question in enumerate(item["turns"]):
            ids = self.encode(history, question)
            # Per prompt-turn seed: a sampled output does not depend on which prompts ran before it.
            self.engine.reseed(zlib.crc32(f"{self.cfg.run.seed}-{item['question_id']}-{turn}".encode()))
            gen, wall = self.timed(ids)
            history.append((question, tok.decode(gen.output_ids, skip_special_tokens=True)))
            if records is None:
                continue
            if sum(gen.accept_lengths) != len(gen.output_ids):
                raise RuntimeError(f"{self.cfg.method.name}: accept lengths do not add up to the output length")
            records.append({
                "question_id": item["question_id"],
                "category": item["category"],
                "group": item["group"],
                "turn": turn,
                "prompt_tokens": len(ids),
                "new_tokens": len(gen.output_ids),
                "wall_time": wall,
                "steps": len(gen.accept_lengths),
                "accept_lengths": gen.accept_lengths,
                "phase_times": gen.phase_times,
                "output_ids": gen.output_ids,
                "lossless": self.reference(ids, gen.output_ids),
            })

    def run(self) -> list[dict]:
        for item in self.items:  # fail before any timing if a first-turn prompt cannot fit
            self.encode([], item["turns"][0])
        for _ in range(self.cfg.run.warmup):
            self.run_item(self.items[0])
        records: list[dict] = []
        desc = f"{self.cfg.method.name} on {self.cfg.dataset.name}"
        for item in tqdm(self.items, desc=desc, unit="q", file=sys.stderr):
            self.run_item(item, records)
        return records


def find_baseline(results: Path, summary: dict, method: str) -> tuple[str, list[dict]] | None:
    """Latest complete run of `method` with the same model, dataset, max_new_tokens and machine."""
    best = None
    for s in sorted((results / "runs").glob("*/summary.json")):
        other = json.loads(s.read_text())
        same = all(other.get(k) == summary[k] for k in ("model", "dataset", "max_new_tokens", "machine"))
        same = same and other.get("temperature", 0.0) == summary["temperature"]
        if same and other["method"] == method and not other.get("variant"):
            best = s.parent
    if best is None:
        return None
    return best.name, [json.loads(line) for line in (best / "records.jsonl").read_text().splitlines()]


def command_overrides() -> dict[str, str]:
    """This job's command-line/sweep overrides as {key: value} (a sweep's swept values), {} outside Hydra."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return {}
    pairs = (o.split("=", 1) for o in HydraConfig.get().overrides.task if "=" in o)
    return {k.lstrip("+~"): v for k, v in pairs}


def write_run(cfg, runner: Runner, records: list[dict]) -> Path:
    b = runner.bundle
    results = project_path(cfg.paths.results)
    rid = run_id(cfg)
    prov = provenance(b.device, b.dtype)
    summary = {
        "run_id": rid,
        "created": datetime.now().isoformat(timespec="seconds"),
        "method": cfg.method.name,
        "variant": cfg.run.variant,
        "dataset": cfg.dataset.name,
        "model": cfg.model.name,
        "paper_size": cfg.model.get("paper_size"),
        "max_new_tokens": cfg.run.max_new_tokens,
        "temperature": runner.temperature,
        "selection": runner.selection,
        "experiment": cfg.run.get("experiment"),
        "overrides": command_overrides(),
        "machine": prov["machine"],
        "method_settings": runner.method.describe(),
        "summary": metrics.summarize(records),
        "groups": metrics.by_group(records),
        "provenance": prov,
    }
    speedups = {}
    for base in ("hf_generate", "ar"):
        found = find_baseline(results, summary, base)
        if found:
            speedups[f"vs_{base}"] = {"value": metrics.speedup(records, found[1]), "baseline_run": found[0]}
    summary["speedup"] = speedups
    # Write into a hidden temp dir and rename: a crash never leaves a run that looks complete.
    final = results / "runs" / rid
    tmp = results / "runs" / f".tmp-{rid}"
    tmp.mkdir(parents=True)
    try:
        with (tmp / "records.jsonl").open("w") as f:
            for r in records:
                f.write(json.dumps(r) + "\n")
        (tmp / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
        (tmp / "summary.json").write_text(json.dumps(summary, indent=2))
        os.replace(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def print_summary(path: Path) -> None:
    s = json.loads((path / "summary.json").read_text())
    m = s["summary"]
    ll = m["lossless"]
    sp = s["speedup"].get("vs_hf_generate") or s["speedup"].get("vs_ar") or {}

    def fmt(x, spec=".2f"):
        return "—" if x is None else format(x, spec)

    print(
        f"{s['method']}: MAT {fmt(m['mat'])}, {fmt(m['tokens_per_s']['mean_of_questions'], '.1f')} tok/s, "
        f"speedup {fmt(sp.get('value'))}, lossless {ll['equal']}/{ll['checked']}, "
        f"overhead {fmt(m['overhead_share'], '.3f')}"
    )


def check_names(argv: list[str]) -> None:
    """Fail fast with one line on unknown group options, before Hydra prints its multi-line error."""
    for arg in argv:
        if "=" not in arg or arg.startswith(("+", "~", "hydra")):
            continue
        key, value = arg.split("=", 1)
        if key in ("model", "dataset", "method", "logger", "tree", "datastore", "experiment"):
            known = sorted(p.stem for p in (CONF / key).glob("*.yaml"))
            for v in value.split(","):
                if v and v not in known and not v.startswith(("glob(", "choice(", "range(")):
                    print(f"error: unknown {key} '{v}' (known: {', '.join(known)})", file=sys.stderr)
                    sys.exit(2)


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> None:
    try:
        torch.manual_seed(cfg.run.seed)
        runner = Runner(cfg)
        records = runner.run()
        path = write_run(cfg, runner, records)
    except (HarnessError, DataError, UnknownMethod) as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(1)
    if cfg.logger.name == "wandb":
        from bench.wandb_log import log_run

        log_run(cfg, path)
    print_summary(path)
    print(f"results: {path}")


if __name__ == "__main__":
    check_names(sys.argv[1:])
    main()
