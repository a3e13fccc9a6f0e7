"""Token Recycling Table 1 and the reports CLI on a hand-made results dir: every expected number is worked out
by hand from the records."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from bench.report.__main__ import main
from bench.report.registry import resolve
from bench.report.select import RunSet
from bench.report.token_recycling.table1 import build_token_recycling_table1, token_recycling_table1
from tests.fixtures.runs import Memory, bound, write

REPO = Path(__file__).resolve().parents[1]


def record(qid, group, tokens, wall, accepts, equal=None):
    assert sum(accepts) == tokens
    return {"question_id": qid, "category": group, "group": group, "turn": 0, "new_tokens": tokens,
            "wall_time": wall, "accept_lengths": accepts, "phase_times": {"generate": wall},
            "output_ids": list(range(tokens)),
            "lossless": None if equal is None else {"equal": equal, "first_divergence": None if equal else 3}}


def write_run(results, run_id, method, dataset, created, records, variant=None, summary=True,
              model="smollm2-135m", machine="test-cpu", experiment=None, **meta):
    if not summary:  # a run still being written: records, no summary.json (the store never leaves one)
        d = results / "runs" / run_id
        d.mkdir(parents=True)
        (d / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
        return
    write(results, records, {  # the summary/groups blocks are deliberately bogus: the report must use records
        "run_id": run_id, "method": method, "variant": variant, "dataset": dataset,
        "model": model, "paper_size": "7B", "max_new_tokens": 64, "created": created,
        "machine": machine, "experiment": experiment, "summary": {"mat": 99.0}, "groups": {}, **meta})


def write_runs(r):
    """Every complete run of the hand-made results, in memory or under a folder; returns r."""
    # Baseline: 10 tok/s on both questions, AR steps.
    write_run(r, "base", "hf_generate", "spec_bench", "2025-01-01T00:00:00",
              [record("q1", "mt_bench", 10, 1.0, [1] * 10), record("q2", "qa", 10, 1.0, [1] * 10)])
    write_run(r, "ar", "ar", "spec_bench", "2025-01-01T00:30:00",  # our extra row: shown because it ran
              [record("q1", "mt_bench", 10, 1.0, [1] * 10), record("q2", "qa", 10, 1.0, [1] * 10)])
    # An older token_recycling run that must lose to the newer one.
    write_run(r, "tr_old", "token_recycling", "spec_bench", "2025-01-02T00:00:00",
              [record("q1", "mt_bench", 10, 10.0, [1] * 10), record("q2", "qa", 10, 10.0, [1] * 10)])
    # 20 tok/s on mt_bench, 30 tok/s on qa; 10 steps pooled for 50 tokens -> MAT 5.00.
    write_run(r, "tr_new", "token_recycling", "spec_bench", "2025-01-03T00:00:00+00:00",
              [record("q1", "mt_bench", 20, 1.0, [1, 4, 5, 5, 5], equal=True),
               record("q2", "qa", 30, 1.0, [1, 7, 7, 7, 8], equal=False)])
    write_run(r, "tr_shuffle", "token_recycling", "spec_bench", "2025-01-03T01:00:00",
              [record("q1", "mt_bench", 15, 1.0, [1, 7, 7]), record("q2", "qa", 15, 1.0, [1, 7, 7])],
              variant="shuffle")
    # MBPP: 12 tokens in 4 steps over 2 s -> MAT 3.00, 6 tok/s; no hf_generate MBPP run -> no speedup.
    write_run(r, "tr_mbpp", "token_recycling", "mbpp_tr", "2025-01-04T00:00:00",
              [record("m1", "all", 12, 2.0, [1, 3, 4, 4], equal=True)])
    return r


@pytest.fixture
def runs():
    """The runs in memory, for the builder's numbers."""
    return write_runs(Memory())


@pytest.fixture
def results(tmp_path):
    """The runs written under tmp_path/results, for the store and the CLI."""
    r = write_runs(tmp_path / "results")
    # Still being written (no summary.json): newest and absurd, must be ignored.
    write_run(r, "tr_partial", "token_recycling", "spec_bench", "2099-01-01T00:00:00",
              [record("q1", "mt_bench", 10, 100.0, [10])], summary=False)
    return r


def row(df, label):
    return df.set_index("label").loc[label]


def test_numbers_come_from_latest_complete_records(results):
    df = build_token_recycling_table1(bound("token_recycling/table1", RunSet.read(results)))
    assert df.attrs["model"] == "smollm2-135m" and df.attrs["paper_size"] == "7B"
    tr = row(df, "token_recycling")
    assert tr["mt"] == pytest.approx(2.0) and tr["qa"] == pytest.approx(3.0)
    assert math.isnan(tr["trans"])  # no translation records
    assert tr["specbench_speedup"] == pytest.approx(2.5)
    assert tr["specbench_tok_s"] == pytest.approx(25.0)
    assert tr["specbench_mat"] == pytest.approx(5.0)
    assert tr["specbench_lossless"] == "1/2 (0 near-tie, 1 mismatch)" and tr["specbench_run_id"] == "tr_new"
    assert tr["mbpp_mat"] == pytest.approx(3.0) and tr["mbpp_tok_s"] == pytest.approx(6.0)
    assert math.isnan(tr["mbpp_speedup"])
    assert any("no hf_generate run on mbpp_tr" in n for n in df.attrs["notes"])
    assert "tr_partial" not in df.attrs["run_ids"].values()
    vanilla = row(df, "hf_generate")
    assert vanilla["specbench_speedup"] == 1.0 and vanilla["mt"] == 1.0 and vanilla["specbench_mat"] == 1.0
    assert row(df, "token_recycling[shuffle]")["specbench_speedup"] == pytest.approx(1.5)


def test_speedups_pair_runs_measured_the_same_way(runs):
    """A newer baseline from a parallel sweep (another machine label) does not pair with a sequential run."""
    write_run(runs, "base_parallel", "hf_generate", "spec_bench", "2025-02-01T00:00:00",
              [record("q1", "mt_bench", 10, 5.0, [1] * 10), record("q2", "qa", 10, 5.0, [1] * 10)],
              machine="test-cpu/1t/2jobs")
    df = build_token_recycling_table1(bound("token_recycling/table1", runs))
    assert row(df, "token_recycling")["specbench_speedup"] == pytest.approx(2.5)  # against "base", not 12.5
    assert row(df, "hf_generate")["specbench_run_id"] == "base_parallel"


def test_no_baseline_over_other_weights(runs):
    """The fallback baseline (none measured alike: another machine) is the latest hf_generate run over the run's
    weights: the same name over other weights is another model. The newer run over other weights is passed over
    for the older one (no weights recorded: the same as far as it says); with none, no speedup and a note."""
    edited = [record("q1", "mt_bench", 20, 1.0, [1, 4, 5, 5, 5]), record("q2", "qa", 30, 1.0, [1, 7, 7, 7, 8])]
    other = [record("q1", "mt_bench", 10, 2.0, [1] * 10), record("q2", "qa", 10, 2.0, [1] * 10)]
    write_run(runs, "tr_edited", "token_recycling", "spec_bench", "2025-03-01T00:00:00", edited,
              machine="other-cpu", weights="edited")
    write_run(runs, "base_other", "hf_generate", "spec_bench", "2025-03-01T01:00:00", other,
              machine="third-cpu", weights="original")
    df = build_token_recycling_table1(bound("token_recycling/table1", runs))
    assert row(df, "token_recycling")["specbench_speedup"] == pytest.approx(2.5)  # "base", not 5.0 "base_other"
    assert any("machine differs from the baseline's" in n for n in df.attrs["notes"])
    alone = Memory()
    write_run(alone, "tr_edited", "token_recycling", "spec_bench", "2025-03-01T00:00:00", edited,
              machine="other-cpu", weights="edited")
    write_run(alone, "base_other", "hf_generate", "spec_bench", "2025-03-01T01:00:00", other,
              machine="third-cpu", weights="original")
    df = build_token_recycling_table1(bound("token_recycling/table1", alone))
    assert math.isnan(row(df, "token_recycling")["specbench_speedup"])
    assert any("no hf_generate run over the same weights on spec_bench" in n for n in df.attrs["notes"])


def test_paper_values_beside_ours(runs):
    df = build_token_recycling_table1(bound("token_recycling/table1", runs))
    # every paper row, run or not (medusa); our extra rows only when run (ar is, hf_pld is not)
    assert list(df["label"]) == ["hf_generate", "ar", "lookahead", "pld", "rest", "medusa",
                                 "token_recycling", "token_recycling[shuffle]"]
    assert row(df, "token_recycling")["mt_paper"] == 2.17
    assert row(df, "token_recycling[shuffle]")["specbench_tok_s_paper"] == 109.07
    assert math.isnan(row(df, "medusa")["mbpp_mat_paper"]) and math.isnan(row(df, "ar")["mt_paper"])
    assert row(df, "hf_generate")["specbench_tok_s_paper"] == 54.30
    assert row(build_token_recycling_table1(bound("token_recycling/table1", runs), paper_size="13B"), "token_recycling")["mt_paper"] == 1.98


def test_files_and_cells(results, capsys):
    assert main(["token_recycling_table1", "--results", str(results)]) == 0
    out = capsys.readouterr().out
    tables = results / "tables"
    md = (tables / "token_recycling_table1.md").read_text()
    assert out == md
    assert "| 2.00 (2.17) |" in md  # TR MT: ours 2.00, paper 2.17
    assert "— (1.64)" in md  # lookahead: no run, paper MAT 1.64
    medusa = next(line for line in md.splitlines() if line.startswith("| medusa"))
    assert "— (1.90)" in medusa  # a paper row without a run of ours: dashes beside the paper's values
    assert "| hf_pld" not in md  # not in the paper and not run: no row
    assert "ours (paper)" in md and "test-cpu" in md and "tr_new" in md and "mean over questions" in md
    csv = pd.read_csv(tables / "token_recycling_table1.csv").set_index("label")
    assert csv.loc["token_recycling", "mt"] == 2.0 and csv.loc["token_recycling", "mt_paper"] == 2.17
    assert csv.loc["medusa", ["mt", "specbench_mat"]].isna().all()  # tidy: empty cells, never "—"
    tex = (tables / "token_recycling_table1.tex").read_text()
    assert "\\toprule" in tex and "token\\_recycling" in tex and "2.00 (2.17)" in tex
    assert not list(tables.glob(".*"))  # no temp files left behind


def test_registry_and_default_model():
    assert resolve("token_recycling_table1") == resolve("token_recycling/table1")
    assert resolve("token_recycling_table1")[1].build is token_recycling_table1
    assert build_token_recycling_table1(bound("token_recycling/table1", Memory())).attrs["model"] == "smollm2-135m"


def test_unknown_report_is_one_line_exit_2():
    p = subprocess.run([sys.executable, "-m", "bench.report", "no_such_report"], cwd=REPO, check=False,
                       capture_output=True, text=True)
    assert p.returncode == 2
    assert len(p.stderr.strip().splitlines()) == 1 and "no_such_report" in p.stderr


def test_mbpp_columns_can_come_from_another_model(runs):
    # The paper: Vicuna on SpecBench, Code Llama on MBPP. 8 tokens in 2 steps over 1 s -> MAT 4, 8 tok/s.
    write_run(runs, "code_tr", "token_recycling", "mbpp_tr", "2025-01-05T00:00:00",
              [record("m1", "code", 8, 1.0, [4, 4], equal=True)], model="codellama-7b")
    same = row(build_token_recycling_table1(bound("token_recycling/table1", runs), model="smollm2-135m"), "token_recycling")
    assert same["mbpp_mat"] == pytest.approx(3.0)  # only smollm2's own MBPP run
    mixed_df = build_token_recycling_table1(bound("token_recycling/table1", runs), model="smollm2-135m", mbpp_model="codellama-7b")
    mixed = row(mixed_df, "token_recycling")
    assert mixed["mbpp_mat"] == pytest.approx(4.0) and mixed["mbpp_tok_s"] == pytest.approx(8.0)
    assert mixed["specbench_mat"] == pytest.approx(5.0)
    assert "codellama-7b" in mixed_df.attrs["model"]


def test_list_names_every_artifact(capsys):
    assert main(["--list"]) == 0
    listed = capsys.readouterr().out.split()
    assert sorted(listed[:3]) == ["draft_sd", "project", "runs"] and {"token_recycling/table1", "token_recycling/fig3", "token_recycling/fig4",
                                    "token_recycling/auto", "dyspec/table", "dyspec/time_breakdown",
                                    "dyspec/table5"} <= set(listed)
    assert main(["list"]) == 0 and capsys.readouterr().out.split() == listed


def test_registry_is_lazy_and_options_belong_to_their_artifact(results, capsys):
    # Naming an artifact imports its own paper's report modules (where the declarations live), no other paper's;
    # listing every name imports no model code (torch).
    code = ("import sys; from bench.report.registry import names, resolve; resolve('dyspec/table'); "
            "print(sorted({m.split('.')[2] for m in sys.modules if m.startswith('bench.report.') and "
            "m.count('.') > 2})); names(); print('torch' in sys.modules)")
    p = subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True, capture_output=True, text=True)
    papers, torch = p.stdout.split("\n")[:2]
    assert eval(papers) == ["dyspec"] and torch == "False"
    with pytest.raises(SystemExit) as e:  # --paper-table is dyspec/table's, not token_recycling/table1's
        main(["token_recycling/table1", "--results", str(results), "--paper-table", "1"])
    assert e.value.code == 2 and "--paper-table" in capsys.readouterr().err


def test_missing_runs_dir_is_one_line_exit_1(tmp_path, capsys):
    assert main(["runs", "--results", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err == f"bench.report: error: no runs/ under {str(tmp_path)!r}\n"


def test_an_artifacts_own_option_may_come_before_its_name(results, capsys):
    assert main(["--mbpp-model", "smollm2-135m", "token_recycling/table1", "--results", str(results)]) == 0
    assert capsys.readouterr().out == (results / "tables" / "token_recycling_table1.md").read_text()


def test_paired_baseline_covers_most_questions_then_is_the_latest_of_equals():
    """Another artifact's later AR run on fewer questions does not replace the baseline a run was paired with."""
    from pathlib import Path

    from bench.report.select import paired_baseline
    from bench.run.store import Run

    def run(name, method, questions, turns=1):
        r = Run(Path(name), {"run_id": name, "method": method, "model": "m", "dataset": "d", "machine": "x",
                             "max_new_tokens": 128})
        r.__dict__["records"] = [{"question_id": q, "turn": t} for q in questions for t in range(turns)]
        return r

    ours = run("ours", "holistic", range(5), turns=2)
    wide, narrow, other_turns = run("ar5", "ar", range(5), 2), run("ar3", "ar", range(3), 2), run("ar5t", "ar", range(5))
    assert paired_baseline([wide, narrow], ours, "ar") is wide  # the later one covers only 6 of 10
    assert paired_baseline([narrow, wide], ours, "ar") is wide
    twin = run("ar5b", "ar", range(5), 2)
    assert paired_baseline([wide, twin, other_turns], ours, "ar") is twin  # a tie: the latest
    assert paired_baseline([narrow], run("o", "pld", [9]), "ar") is narrow  # no overlap at all: still the latest
    assert paired_baseline([narrow], run("o", "ar", [1]), "pld") is None


def test_paired_baseline_of_equal_cover_is_the_one_of_the_same_sitting():
    """Machine labels name a kind of machine: of two AR runs covering the same questions, a run is paired with the
    one on its own boot, else the one measured nearest in time, not with another sitting's later one."""
    from pathlib import Path

    from bench.report.select import paired_baseline
    from bench.run.store import Run

    def run(name, method, created, boot=None):
        r = Run(Path(name), {"run_id": name, "method": method, "model": "m", "dataset": "d", "machine": "x",
                             "max_new_tokens": 128, "created": created, "provenance": {"boot_id": boot}})
        r.__dict__["records"] = [{"question_id": q, "turn": 0} for q in range(3)]
        return r

    early, late = run("ar1", "ar", "2026-11-24T22:17:00"), run("ar2", "ar", "2026-11-25T01:06:00")
    ours = run("sd", "sd", "2026-11-24T22:28:00")
    assert paired_baseline([early, late], ours, "ar") is early  # 0.2 h apart, not 2.6 h
    assert paired_baseline([early, late], run("tr", "pld", "2026-11-25T01:20:00"), "ar") is late
    same = run("ar3", "ar", "2026-11-20T00:00:00", boot="b")  # days earlier, but the same machine instance
    assert paired_baseline([early, same, late], run("o", "sd", "2026-11-24T22:20:00", boot="b"), "ar") is same
    assert paired_baseline([early, same, late], ours, "ar") is early  # no boot id: nearest in time


def test_another_papers_later_runs_stay_out_of_table1(runs):
    """A later AR and hf_generate run of another experiment (Post-use & Pre-cut's Table 10 on spec_bench, say)
    neither fills Table 1's rows nor becomes its baseline; hand runs (no experiment) and Table 1's own do."""
    before = build_token_recycling_table1(bound("token_recycling/table1", runs))
    for method in ("ar", "hf_generate"):
        write_run(runs, f"{method}_other", method, "spec_bench", "2025-02-01T00:00:00",
                  [record("q1", "mt_bench", 10, 5.0, [1] * 10)], experiment="holistic")
    pd.testing.assert_frame_equal(build_token_recycling_table1(bound("token_recycling/table1", runs)), before)
    write_run(runs, "ar_table1", "ar", "spec_bench", "2025-02-02T00:00:00",
              [record("q1", "mt_bench", 10, 5.0, [1] * 10)], experiment="table1")
    assert row(build_token_recycling_table1(bound("token_recycling/table1", runs)), "ar")["mt"] != row(before, "ar")["mt"]


def test_a_damaged_records_file_is_one_error_line(results, capsys):
    """Runs are written whole (bench.run.store.write_run): a records file cut later is refused, never half counted."""
    path = results / "runs" / "tr_new" / "records.jsonl"
    path.write_text(path.read_text()[:-40])
    assert main(["token_recycling/table1", "--results", str(results)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{path} is damaged at line 2" in err


def test_a_name_no_run_has_is_named(results, capsys):
    assert main(["runs", "--results", str(results), "--dataset", "spec_bnech"]) == 1
    assert "dataset 'spec_bnech' not among the runs' (mbpp_tr, spec_bench)" in capsys.readouterr().err


def test_runs_table_pairs_only_baselines_measured_alike():
    """A PLD run at 16 new tokens has no speedup over an AR run at 8 (another length), and the footer says so."""
    from bench.report.runs import runs_table
    from bench.run.store import Run

    def run(method, max_new, created):
        meta = {"run_id": method, "method": method, "dataset": "spec_bench", "model": "smollm2-135m",
                "machine": "test-cpu", "max_new_tokens": max_new, "created": created, "temperature": 0.0}
        return Run.of(meta, [record("q1", "qa", 8, 1.0, [1] * 8)])

    md = runs_table(RunSet([run("ar", 8, "2025-01-01T00:00:00"), run("pld", 16, "2025-01-02T00:00:00")],
                           Path("mem"))).markdown
    pld = next(line for line in md.splitlines() if line.startswith("| smollm2-135m | spec_bench | pld"))
    assert pld.split("|")[9].strip() == "—"  # speedup vs ar
    assert "No baseline measured alike (temperature, batch size, machine, max_new_tokens): pld vs ar." in md


def test_a_cut_gzipped_records_file_is_one_error_naming_it(tmp_path):
    """Evidence keeps records gzipped (turns.jsonl.gz): a copy cut short is refused, not half read."""
    import gzip

    from bench.errors import HarnessError
    from bench.run.store import read_records

    data = gzip.compress("".join(json.dumps({"n": i, "pad": "x" * 200}) + "\n" for i in range(200)).encode())
    (tmp_path / "turns.jsonl.gz").write_bytes(data[: len(data) // 2])
    with pytest.raises(HarnessError, match=r"turns.jsonl.gz is damaged at line \d+ \("):
        read_records(tmp_path)
