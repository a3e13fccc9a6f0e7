"""Which mix of EAGLE-3's data sources buys the best held-out agreement per CPU minute (issue 43).

    python scripts/eagle3_mix.py [model=smollm2-135m] [--minutes=6] [--mixes=answers,reference,web,all]

From the cached data of the model's `eagle3.train` recipe (built first if missing, as `make eagle3` would), one head
per mix trains for the same minutes (the recipe otherwise unchanged, the same draft vocabulary), then held-out
agreement per depth is measured on every source. Each mix's data cost is what building its sources took (the
cache's own timings: generation and the target's forward, shared by positions). Writes
results/eagle3/mix-<host>.json and prints a table; mixes are sources joined by '+' ("all": every source).
Timings are this machine's and this run's: compare rows of one run only. The recipe's `answers` source only
evaluates (train: 0); evidence/eagle3/mix-200steps.json gave it 128 training prompts
(`model.eagle3.train.data.sources.0.train=128`).
"""

from __future__ import annotations

import json
import sys
import time

import torch

from bench.cli import run_script
from bench.core.machine import machine_id
from bench.errors import HarnessError
from bench.models.eagle3 import Eagle3Head, eagle3_dir, fused_layers
from bench.paths import project_path
from bench.run.compose import compose_config
from bench.run.runner import get_bundle
from bench.train.eagle3 import agreement, draft_vocabulary, pooled, train, warm_start
from bench.train.eagle3_data import eagle3_data
from bench.train.recipes import check_recipes, plain
from bench.train.selfdistill import end_tokens

USAGE = "eagle3_mix.py [model=<name>] [--minutes=N] [--mixes=a,b+c,all] [overrides...]"


def data_minutes(stats: dict, names: list[str]) -> dict[str, float]:
    """Minutes each source's training split cost to build: its generation, plus the forward shared by positions."""
    total = sum(stats["sources"][n]["train"]["positions"] for n in names)
    out = {}
    for n in names:
        st = stats["sources"][n]
        gen = st.get("generation", {}).get("train", {}).get("generate_seconds", 0.0)
        out[n] = (gen + stats["train_forward_seconds"] * st["train"]["positions"] / max(total, 1)) / 60
    return out


def main(argv: list[str]) -> int:
    if "-h" in argv or "--help" in argv:
        print(f"usage: {USAGE}")
        return 0
    opts = {a.split("=", 1)[0]: a.split("=", 1)[1] for a in argv if a.startswith("--") and "=" in a}
    overrides = [a for a in argv if not a.startswith("--")]
    try:
        unknown = set(opts) - {"--minutes", "--mixes"}
        if unknown or any(a.startswith("--") and "=" not in a for a in argv):
            raise HarnessError(f"usage: {USAGE}")
        cfg = check_recipes(compose_config(overrides), "eagle3")
        e3 = cfg.model.get("eagle3")
        if e3 is None or e3.get("train") is None:
            raise HarnessError(f"model '{cfg.model.name}' has no eagle3.train recipe")
        recipe = {**plain(e3.train), "max_minutes": float(opts.get("--minutes", 6))}
        names = [s["name"] for s in recipe["data"]["sources"]]
        mixes = opts.get("--mixes", ",".join(names + ["all"])).split(",")
        for mix in mixes:
            if mix != "all" and not set(mix.split("+")) <= set(names):
                raise HarnessError(f"mix '{mix}': sources are {', '.join(names)} (joined by '+') or all")
        bundle = get_bundle(cfg.model, cfg.paths.model_cache)
        target = bundle.model
        layers = fused_layers(target, e3.get("layers"))
        data, _ = eagle3_data(target, bundle.tokenizer, cfg.model, recipe["data"], layers,
                              eagle3_dir(project_path(cfg.paths.model_cache)), str(project_path(cfg.paths.data_mirror)),
                              str(project_path(cfg.paths.data_cache)))
        used_by = {mix: names if mix == "all" else mix.split("+") for mix in mixes}
        for mix, used in used_by.items():  # an evaluation-only source (train: 0) has nothing to train on
            if not any(data.stats["sources"][n]["train"]["sequences"] for n in used):
                raise HarnessError(f"mix '{mix}': no training sequences in {', '.join(used)} (train: 0; e.g. "
                                   f"model.eagle3.train.data.sources.0.train=128 gives the answers source some)")
    except HarnessError as err:
        sys.exit(f"error: {err}")
    vocab = draft_vocabulary(data.train, target.config.vocab_size, int(recipe["draft_vocab"]),
                             end_tokens(target, bundle.tokenizer)[0])
    lm_head = target.get_output_embeddings().weight.detach()
    cost = data_minutes(data.stats, names)
    rows = []
    for mix in mixes:
        used = used_by[mix]
        head = Eagle3Head.from_target(target, vocab, layers, seed=int(recipe.get("seed", 0)))
        warm_start(head, target, bool(recipe.get("identity_init", True)))
        t0 = time.perf_counter()
        result = train(head, lm_head, data.train, recipe, sources=[names.index(n) for n in used])
        by_source = {n: agreement(head, lm_head, data.heldout, 4, source=i) for i, n in enumerate(names)}
        rows.append({"mix": mix, "data_minutes": round(sum(cost[n] for n in used), 2),
                     "train_minutes": round(result["train_seconds"] / 60, 2), "steps": result["steps"],
                     "wall_seconds": round(time.perf_counter() - t0, 1),
                     "agreement": {"all": pooled(by_source), **by_source}})
        a = rows[-1]["agreement"]
        print(f"{mix}: data {rows[-1]['data_minutes']} min + train {rows[-1]['train_minutes']} min, "
              f"{result['steps']} steps; answers d1 {a['answers']['1'][0]:.1%} d3 {a['answers']['1'][2]:.1%}; "
              f"all d1 {a['all']['1'][0]:.1%} d3 {a['all']['1'][2]:.1%}", flush=True)
    machine = machine_id(target.device)
    out = project_path(cfg.paths.results) / "eagle3" / f"mix-{machine.split('/')[0]}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps({"model": str(cfg.model.name), "machine": machine, "threads":
                               torch.get_num_threads(), "minutes_each": recipe["max_minutes"], "rows": rows},
                              indent=2) + "\n")
    tmp.replace(out)
    print(f"-> {out}")
    return 0


if __name__ == "__main__":
    run_script(main)
