"""DySpec's reports (bench/report/dyspec/: Tables 1-3, Figure 4 breakdown) on hand-made runs: expected values
by hand."""

from __future__ import annotations

import dataclasses
import math
from datetime import datetime
from pathlib import Path

import pandas as pd
import pytest

from bench.errors import HarnessError
from bench.paths import project_path
from bench.report.__main__ import main
from bench.report.dyspec import tables as dyspec_tables
from bench.report.dyspec.tables import build_dyspec_table, dyspec_table
from bench.report.dyspec.time_breakdown import (
    FIG4_COMPONENTS,
    build_dyspec_time_breakdown,
    dyspec_component_shares,
    dyspec_time_breakdown,
)
from bench.report.registry import resolve
from bench.run.store import Run
from tests.fixtures.dyspec_results import (
    DATASETS,
    MAT,
    METHODS,
    PHASES,
    SELECTION,
    TOKENS,
    Writer,
    expected_latency,
    write_full,
)
from tests.fixtures.runs import Memory, bound, build, frame


@pytest.fixture
def results():
    return Memory()


@pytest.fixture
def full(results):
    return write_full(results)


@pytest.fixture
def on_disk(tmp_path):
    """The full fixture written under tmp_path/results, for the CLI."""
    return write_full(tmp_path / "results")


def table_frame(results: Memory, **options) -> pd.DataFrame:
    return build_dyspec_table(bound("dyspec/table", results), **options)


def table_md(results: Memory, **options) -> str:
    """The table's markdown as the CLI builds it (nothing written)."""
    return build("dyspec/table", results, **options).markdown


def breakdown_frame(results: Memory, **options) -> pd.DataFrame:
    return build_dyspec_time_breakdown(results.runset(), **options)


def cell(df, dataset, t, col):
    return df[(df["dataset"] == dataset) & (df["temperature"] == t)][col].item()


def table_lines(md: str) -> list[str]:
    return [line for line in md.splitlines() if line.startswith("| ") and not line.startswith("| Dataset")]


def test_every_cell_is_filled_from_records(full):
    df = table_frame(full)
    assert df.attrs["table"] == 1 and df.attrs["model"] == "smollm2-135m"
    assert [(d, t) for d, t in zip(df["dataset"], df["temperature"])] == [(d, t) for d in DATASETS
                                                                          for t in (0.0, 0.6)]
    for d in DATASETS:
        for t in (0.0, 0.6):
            ar = expected_latency("ar", d, t)
            assert cell(df, d, t, "ar_latency_s") == pytest.approx(ar)
            for m in METHODS[:3]:
                assert cell(df, d, t, f"{m}_latency_s") == pytest.approx(expected_latency(m, d, t))
                assert cell(df, d, t, f"{m}_accepted") == pytest.approx(MAT[m])
                assert cell(df, d, t, f"{m}_speedup") == pytest.approx(ar / expected_latency(m, d, t))
    md = table_md(full)
    lines = table_lines(md)
    assert len(lines) == 6 and not any("—" in line for line in lines)
    # c4 T=0: DySpec 5.00 ms/token (paper 0.00730 s), accepted 3.00 (5.25), speedup 4.00 (0.02303/0.00730).
    first = [c.strip() for c in lines[0].split("|")[1:-1]]
    # Every question of a fixture run is the same: each interval is a point.
    assert first[:5] == ["c4 (C4)", "0", "5.00 [5.00, 5.00] (7.30)", "3.00 [3.00, 3.00] (5.25)",
                         "4.00 [4.00, 4.00] (3.15)"]
    assert first[-1] == "20.00 [20.00, 20.00] (23.03)"


def test_latency_is_total_time_over_total_tokens(results):
    # Two prompts with different lengths and speeds: Sequoia's total_time / tokens, not a mean of rates.
    w = Writer(results)
    w.run("dyspec", "c4", latency=0.01, accepts=[1, 5, 6], questions=(0,))
    records = results.run(w.run("dyspec", "c4", latency=0.01, accepts=[1, 5, 6], questions=(0,))).records
    records.append({**records[0], "question_id": 1, "new_tokens": 4, "wall_time": 1.0, "accept_lengths": [1, 3]})
    df = table_frame(results)
    assert cell(df, "c4", 0.0, "dyspec_latency_s") == pytest.approx((0.12 + 1.0) / 16)
    assert cell(df, "c4", 0.0, "dyspec_accepted") == pytest.approx(16 / 5)


def test_paper_numbers_come_from_the_csv(full, tmp_path, monkeypatch):
    df = table_frame(full)
    assert cell(df, "openwebtext", 0.6, "sequoia_latency_s_paper") == 0.01206
    assert cell(df, "openwebtext", 0.6, "sequoia_accepted_paper") == 3.04
    assert cell(df, "cnn_dailymail", 0.0, "ar_latency_s_paper") == 0.02246
    assert cell(df, "cnn_dailymail", 0.0, "specinfer_speedup_paper") == pytest.approx(0.02246 / 0.01464)
    assert df.attrs["paper_pair"] == "JackFram/llama-68m -> Llama-2-7B" and df.attrs["paper_budget"] == 64
    t2 = table_frame(full, paper_table=2)
    assert cell(t2, "c4", 0.0, "dyspec_accepted_paper") == 4.98 and "13B" in t2.attrs["paper_pair"]
    # A different CSV gives different paper cells: nothing is hard-coded in the report.
    fake = tmp_path / "fake.csv"
    fake.write_text("table,draft,target,tree_budget,dataset,temperature,method,latency_s_per_token,"
                    "accepted_per_step\n1,d,t,64,C4,0,dyspec,0.5,9.99\n1,d,t,64,C4,0,baseline,1.0,\n")
    runs = bound("dyspec/table", full)
    df = build_dyspec_table(dataclasses.replace(runs, published={dyspec_tables.PAPER_CSV: pd.read_csv(fake)}))
    assert cell(df, "c4", 0.0, "dyspec_accepted_paper") == 9.99
    assert cell(df, "c4", 0.0, "dyspec_speedup_paper") == 2.0
    assert math.isnan(cell(df, "c4", 0.6, "dyspec_accepted_paper"))
    assert cell(df, "c4", 0.0, "dyspec_accepted") == pytest.approx(MAT["dyspec"])  # ours unchanged


def test_temperature_06_does_not_replace_temperature_0(results):
    w = Writer(results)
    w.run("dyspec", "c4", 0.0, latency=0.004)
    w.run("dyspec", "c4", 0.6, latency=0.009)  # newer, other temperature
    w.run("sequoia", "c4", 0.0, latency=0.007, with_temperature=False)  # old summary: greedy
    df = table_frame(results)
    assert cell(df, "c4", 0.0, "dyspec_latency_s") == pytest.approx(0.004)
    assert cell(df, "c4", 0.6, "dyspec_latency_s") == pytest.approx(0.009)
    assert cell(df, "c4", 0.0, "sequoia_latency_s") == pytest.approx(0.007)
    assert math.isnan(cell(df, "c4", 0.6, "sequoia_latency_s"))
    keys = set(results.runset().latest_per(lambda r: r.key, batch_size=1))
    assert ("smollm2-135m", "dyspec", None, "c4", 0.0) in keys and ("smollm2-135m", "dyspec", None, "c4", 0.6) in keys
    # The newest run at one temperature does replace an older one at the same temperature.
    w.run("dyspec", "c4", 0.0, latency=0.003)
    assert cell(table_frame(results), "c4", 0.0, "dyspec_latency_s") == pytest.approx(0.003)


def test_runs_with_step_records_do_not_replace_the_tables_runs(results):
    """Figure 2's runs (run.record_steps=true) time the extra recording; a newer one never fills a table cell."""
    w = Writer(results)
    w.run("dyspec", "cnn_dailymail", 0.0, latency=0.004)
    w.run("dyspec", "cnn_dailymail", 0.0, latency=0.009, steps=True)
    assert cell(table_frame(results), "cnn_dailymail", 0.0, "dyspec_latency_s") == pytest.approx(0.004)


def test_claim_over_sequoia_is_decided_per_cell_from_paired_intervals(results):
    w = Writer(results)
    w.run("dyspec", "c4", 0.0, latency=0.004)
    w.run("sequoia", "c4", 0.0, latency=0.008)  # DySpec 2x faster on both questions
    claim = [line for line in table_md(results).splitlines() if line.startswith("Claim")]
    assert claim == [line for line in claim if "holds (1 of 1 cells hold" in line and "C4 T=0 2.00 [2.00, 2.00]" in line]
    assert claim
    w.run("dyspec", "openwebtext", 0.6, latency=0.009)
    w.run("sequoia", "openwebtext", 0.6, latency=0.006)  # slower in one cell: the claim "in every cell" fails
    claim = next(line for line in table_md(results).splitlines() if line.startswith("Claim"))
    assert ": does not hold (1 of 2 cells hold, 0 undecided, 1 not;" in claim and "OWT T=0.6 0.67" in claim


def test_missing_runs_give_dashes_beside_paper_numbers(results):
    Writer(results).run("dyspec", "c4", 0.0)
    rep = build("dyspec/table", results)
    md = rep.markdown
    lines = table_lines(md)
    first = [c.strip() for c in lines[0].split("|")[1:-1]]
    # no AR run: no speedup of ours
    assert first[2:5] == ["5.00 [5.00, 5.00] (7.30)", "3.00 [3.00, 3.00] (5.25)", "— (3.15)"]
    assert first[5] == "— (8.71)" and first[-1] == "— (23.03)"
    df = table_frame(results)
    assert df.drop(columns=[c for c in df.columns if c.startswith("dyspec_") or c.endswith("_paper")]
                   ).select_dtypes("number").drop(columns="temperature").isna().all().all()
    assert "No run: " in md and "AR c4 T=0" in md and "DySpec c4 T=0," not in md
    csv = frame(rep, "tables/dyspec_table1.csv")
    assert csv["sequoia_latency_s"].isna().all() and "—" not in rep.files["tables/dyspec_table1.csv"]


def test_no_runs_at_all_still_prints_the_paper(results):
    lines = table_lines(table_md(results))
    assert len(lines) == 6 and all(c.strip().startswith("— (") or c.strip() in ("0", "0.6") or "(" in c
                                   for line in lines for c in line.split("|")[1:-1])


def test_footer_states_pairs_selection_machine_and_ar_protocol(full):
    md = table_md(full)
    assert "target smollm2-135m, draft: distilled fixture-draft-68m" in md
    assert "paper: JackFram/llama-68m -> Llama-2-7B, tree budget 64, one A100 40GB" in md
    assert f"c4: 2 prompts measured; selection: {SELECTION}" in md
    assert "Machine: fixture/GPU" in md and "dtype: float16" in md
    assert "only 32 decoding steps" in md and "full max_new_tokens" in md
    assert "C4 en/train" in md
    assert "dyspec/c4/T=0.6=" in md  # run ids named by method, dataset, temperature


def test_files_cli_and_table_choice(on_disk, capsys):
    full = on_disk
    assert resolve("dyspec_table")[1].build is dyspec_table
    assert main(["dyspec/table", "--results", str(full), "--paper-table", "2"]) == 0
    out = capsys.readouterr().out
    tables = full / "tables"
    assert out == (tables / "dyspec_table2.md").read_text() and "DySpec Table 2" in out
    tex = (tables / "dyspec_table2.tex").read_text()
    assert "\\toprule" in tex and "c4 (C4)" in tex
    assert not list(tables.glob(".*"))
    assert main(["dyspec_table", "--results", str(full), "--paper-size", "70B"]) == 0  # the old name works
    assert (tables / "dyspec_table3.md").is_file()
    capsys.readouterr()
    assert main(["dyspec/table", "--results", str(full), "--paper-table", "9"]) == 1
    err = capsys.readouterr().err
    assert "no Table 9" in err and len(err.strip().splitlines()) == 1


def test_default_table_follows_the_model_paper_size(results):
    Writer(results).run("dyspec", "c4", model="big", paper_size="13B")
    assert table_frame(results).attrs["table"] == 2


# ---------------------------------------------------------------- Figure 4 time breakdown


def test_component_shares_sum_to_one_and_map_phases():
    shares = dyspec_component_shares({**PHASES, "mystery": 0.1})
    assert sum(shares.values()) == pytest.approx(1.0)
    total = 1.1
    assert shares["target_forward"] == pytest.approx(0.5 / total)  # target_forward + prefill
    assert shares["tree_construction"] == pytest.approx(0.05 / total)
    assert shares["mask_building"] == pytest.approx(0.05 / total)
    assert shares["other"] == pytest.approx((0.03 + 0.02 + 0.1) / total)  # update + draft + unknown
    assert dyspec_component_shares({}) == {}


def test_breakdown_per_method_from_records(full):
    later = Writer(full, start=datetime(2026, 2, 1))  # newer than every run of `full`
    later.run("ar", "c4", 0.0, phases={"prefill": 0.25, "target_forward": 0.5, "update": 0.25})
    df = breakdown_frame(full).set_index("method")
    assert list(df.index) == ["dyspec", "sequoia", "specinfer", "ar"]
    comps = [k for k, _, _ in FIG4_COMPONENTS]
    for m in df.index:
        assert df.loc[m, comps].sum() == pytest.approx(1.0)
    assert df.loc["dyspec", "runs"] == 6 and df.loc["dyspec", "prompts"] == 12
    assert df.loc["dyspec", "draft_forward"] == pytest.approx(0.2)
    assert df.loc["dyspec", "phase_sum_over_wall"] == pytest.approx(1.0)
    # AR pooled: 5 runs with PHASES, the newest c4 T=0 run with its own phases (latest per dataset/temperature).
    walls = {(d, t): TOKENS * 2 * expected_latency("ar", d, t) for d in DATASETS for t in (0.0, 0.6)}
    other = sum(w for k, w in walls.items() if k != ("c4", 0.0))
    expected_tf = (0.5 * other + 0.75 * walls[("c4", 0.0)]) / sum(walls.values())
    assert df.loc["ar", "target_forward"] == pytest.approx(expected_tf)
    # Intervals over prompts: DySpec's prompts all spend the same share; AR's differ between runs.
    assert df.loc["dyspec", ["draft_forward_lo", "draft_forward_hi"]].tolist() == pytest.approx([0.2, 0.2])
    assert df.loc["ar", "target_forward_lo"] < expected_tf < df.loc["ar", "target_forward_hi"]
    only = breakdown_frame(full, dataset="c4", temperature=0.0).set_index("method")
    assert only.loc["ar", "target_forward"] == pytest.approx(0.75) and only.loc["ar", "runs"] == 1


def test_breakdown_files_and_errors(on_disk, capsys):
    full = on_disk
    assert resolve("dyspec_time_breakdown")[1].build is dyspec_time_breakdown
    assert main(["dyspec/time_breakdown", "--results", str(full)]) == 0
    md = capsys.readouterr().out
    assert md == (full / "tables" / "dyspec_time_breakdown.md").read_text()
    assert "| DySpec " in md and "20.0% [20.0%, 20.0%]" in md and "Tree construction (tree)" in md and "under 2%" in md
    png = full / "figures" / "dyspec_time_breakdown.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    csv = pd.read_csv(full / "tables" / "dyspec_time_breakdown.csv")
    assert list(csv["method"]) == ["dyspec", "sequoia", "specinfer", "ar"]
    with pytest.raises(HarnessError, match="no complete dyspec/sequoia/specinfer/ar runs"):
        breakdown_frame(Memory())
    assert main(["dyspec_time_breakdown", "--results", str(full), "--temperature", "0.9"]) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "at T=0.9" in err


def test_run_key_defaults_to_greedy():
    assert Run(Path("x"), {"method": "ar"}).key[-1] == 0.0
    assert Run(Path("x"), {"method": "ar", "temperature": 0.6}).key[-1] == 0.6



def test_paper_table4_has_its_baseline_column():
    """DySpec Table 4's Baseline column (Llama-2-70B AR latency per token) is in the paper CSV, as Table 1's is."""
    paper = pd.read_csv(project_path("bench/report/dyspec/paper_tables/dyspec_tables_latency_per_token.csv"))
    base = paper[(paper["table"] == 4) & (paper["method"] == "baseline")]
    assert len(base) == 6 and base["accepted_per_step"].isna().all()
    assert base.set_index(["dataset", "temperature"]).at[("C4", 0.0), "latency_s_per_token"] == 5.5965
