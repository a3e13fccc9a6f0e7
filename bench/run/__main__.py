"""`python -m bench.run model=... dataset=... method=...`: one run, or a sweep with -m (Hydra).

Prints `results: <run dir>` last. Bad input (unknown model/dataset/method, a method setting the method refuses,
malformed data, missing weights, a prompt longer than the context) prints one `error:` line and exits non-zero.
"""

from __future__ import annotations

import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

from bench.errors import HarnessError
from bench.metrics import lossless_text
from bench.paths import project_path
from bench.run.precheck import check_names
from bench.run.store import read_summary
from bench.run.sweep_failures import in_sweep, mark_failed
from bench.run.validate import check_method, check_run
from data.loaders import DataError, load_selection
from methods import UnknownMethod


def print_summary(path: Path) -> None:
    s = read_summary(path)
    m = s["summary"]
    ll = m["lossless"]
    sp = s["speedup"].get("vs_hf_generate") or s["speedup"].get("vs_ar") or {}

    def fmt(x, spec=".2f"):
        return "—" if x is None else format(x, spec)

    def ci(interval, spec=".2f"):  # the 95% bootstrap interval over questions (bench.metrics)
        return f" [{fmt(interval[0], spec)}, {fmt(interval[1], spec)}]" if interval else ""

    iv = m.get("intervals") or {}
    # A float32 divergence is a failure even where it is graded a near-tie (bench.metrics.lossless_counts).
    fp32 = (s.get("provenance") or {}).get("dtype") == "float32"
    fp32_note = " — not lossless in float32" if fp32 and ll.get("passed") is False else ""
    rate = f"{fmt(m['tokens_per_s']['mean_of_questions'], '.1f')}{ci(iv.get('tokens_per_s'), '.1f')} tok/s"
    speed = f"speedup {fmt(sp.get('value'))}{ci(sp.get('interval'))}"
    if (s.get("batch_size") or 1) > 1:
        rate = (f"batch {s['batch_size']}: {fmt(m['throughput']['aggregate_tokens_per_s'], '.1f')} tok/s aggregate, "
                f"{fmt(m['throughput']['per_sequence_tokens_per_s'], '.1f')} tok/s per sequence")
        sp = s["speedup"].get("vs_ar") or {}  # at batch B the baseline is our AR at the same B
        speed = f"speedup {fmt(sp.get('aggregate'))} aggregate vs ar"
    print(
        f"{s['method']}: MAT {fmt(m['mat'])}{ci(iv.get('mat'))}, {rate}, "
        f"{speed}, lossless {lossless_text(ll) or '0/0'}{fp32_note}, "
        f"overhead {fmt(m['overhead_share'], '.3f')}"
        + "".join(f", resumed after {r['at_record']} prompt-turns" for r in s.get("resumed") or [])
        + (f" in {n} sittings (boot ids)" if (n := len((s.get("provenance") or {}).get("boot_ids") or [])) > 1 else "")
    )


def copy_to_wandb(cfg, path: Path) -> None:
    """The run on W&B, a copy: it is complete on disk whatever W&B does (no key, no network), so a failure is one
    warning line and the run's summary and `results:` line still follow."""
    from bench.run.wandb_log import log_run

    try:
        log_run(cfg, path)
    except Exception as err:  # noqa: BLE001 - wandb raises many types; the run stands
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        print(f"warning: not logged to W&B ({type(err).__name__}: {first}); the run is complete on disk",
              file=sys.stderr)


@hydra.main(version_base="1.3", config_path="../../conf", config_name="config")
def main(cfg: DictConfig) -> None:
    try:
        check_run(cfg)  # bad run.* values or an unwritable results dir: one line, before torch loads
        # missing or malformed data: one line, before torch loads too (the method's module imports it)
        selection = load_selection(cfg.dataset, str(project_path(cfg.paths.data_mirror)),
                                   str(project_path(cfg.paths.data_cache)))
        check_method(cfg)  # bad method settings: one line, before the model loads
        # Loaded here, not at the top: a bad name or value on the command line fails in a fraction of a second.
        from bench.run.jobs import measure

        path = measure(cfg, selection)
    except (HarnessError, DataError, UnknownMethod) as err:
        print(f"error: {err}", file=sys.stderr)
        if not in_sweep():
            sys.exit(1)
        mark_failed(str(err))  # the sweep's other jobs still run; it fails at its end (bench.run.sweep_failures)
        return
    if path is None:  # a re-launched sweep found this job complete
        return
    if cfg.logger.name == "wandb":
        copy_to_wandb(cfg, path)
    print_summary(path)
    print(f"results: {path}")


if __name__ == "__main__":
    check_names(sys.argv[1:])
    try:
        main()
    except KeyboardInterrupt:  # Ctrl-C: the checkpoint holds every complete prompt-turn (bench.run.checkpoint)
        print("error: interrupted; the same command resumes from the last complete prompt-turn (run.resume=true)",
              file=sys.stderr)
        sys.exit(130)
