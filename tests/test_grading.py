"""Graded losslessness (bench.run.grading): in bf16 and fp16 on the CPU, a divergence at a near-tie of the reference's
two best tokens is graded near-tie and a planted wrong token mismatch; the runner records the grade; the summary,
the printed line and the reports' lossless column count the three grades; a float32 divergence stays a failure.

The model is the tiny random Llama with its lm_head scaled to a real model's logit range (top logits ~20) and rows
edited so that, after the prompt and one token, a chosen token ties or nearly ties the best one."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch
from omegaconf import OmegaConf

from bench import metrics
from bench.report.tables import lossless_text
from bench.run.__main__ import print_summary
from bench.run.grading import grade, next_token_logits, tolerance
from bench.run.reference import ReferenceStore
from bench.run.runner import Runner
from tests.conftest import tiny_llama

PROMPT = [3, 7, 11, 5]


def edited_model(dtype, shrink_rounds: float):
    """(model in `dtype`, reference [a, best], tokens {rival, worst}) where, after PROMPT + [a], the rival's lm_head
    row is the best token's row shrunk by `shrink_rounds` unit roundoffs: its logit sits that many roundings of the
    logit below the best one (0: an exact tie)."""
    model = tiny_llama()
    with torch.no_grad():
        model.lm_head.weight.mul_(20.0)  # logits of a real model's scale: the tolerance grows with |top logit|
    model = model.to(dtype)
    a = int(next_token_logits(model, PROMPT).argmax())
    logits = next_token_logits(model, PROMPT + [a])
    order = logits.argsort(descending=True).tolist()
    best, rival, worst = order[0], order[1], order[-1]
    u = torch.finfo(dtype).eps / 2
    with torch.no_grad():
        w = model.lm_head.weight
        w[rival] = (w[best].float() * (1 - shrink_rounds * u)).to(dtype)
    assert int(next_token_logits(model, PROMPT).argmax()) == a  # the edit left the first position alone
    return model, [a, best], {"rival": rival, "worst": worst}


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_near_tie_is_graded_near_tie_and_a_planted_token_mismatch(dtype):
    model, ref, tok = edited_model(dtype, shrink_rounds=1)
    near = grade(model, PROMPT, [ref[0], tok["rival"]], ref)
    assert near["grade"] == "near-tie" and near["first_divergence"] == 1
    assert near["method_gap"] <= near["tolerance"] and near["ref_margin"] <= near["tolerance"]
    assert near["tolerance"] == pytest.approx(tolerance(dtype, float(next_token_logits(model, PROMPT + ref[:1]).max())))
    assert near["tolerance"] > 8 * torch.finfo(dtype).eps / 2  # the logit scale counts (|top logit| > 1 here)

    # gpu-check's form, with where the output departs (its speedup part grades pass against pass so)
    from bench.check.method_check import graded

    bundle = SimpleNamespace(model=model, device=torch.device("cpu"))
    assert graded(bundle, PROMPT, [ref[0], tok["rival"]], ref, where=True) == "near-tie at 1"
    assert graded(bundle, PROMPT, ref, ref, where=True) == "identical"
    assert graded(bundle, PROMPT, [ref[0], tok["rival"]], ref) == "near-tie"
    planted = grade(model, PROMPT, [ref[0], tok["worst"], 9, 9], ref + [2, 2])
    assert planted["grade"] == "mismatch" and planted["first_divergence"] == 1
    assert planted["method_gap"] > 10 * planted["tolerance"]
    # A reference far below the method's token in the fresh forward (a negative gap) is no near-tie either.
    assert grade(model, PROMPT, ref, [ref[0], tok["worst"]])["grade"] == "mismatch"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_a_rival_many_roundings_below_is_a_mismatch(dtype):
    # 64 roundings of the logit below the best: 8x what the tolerance excuses, though far closer than a planted token.
    model, ref, tok = edited_model(dtype, shrink_rounds=64)
    got = grade(model, PROMPT, [ref[0], tok["rival"]], ref)
    assert got["grade"] == "mismatch" and got["method_gap"] > got["tolerance"]


def test_identical_runs_no_forward_and_a_length_difference_is_a_mismatch():
    assert grade(None, PROMPT, [4, 5], [4, 5]) == {"grade": "identical", "first_divergence": None,
                                                   "ref_margin": None, "method_gap": None, "tolerance": None}
    model, ref, _ = edited_model(torch.bfloat16, shrink_rounds=0)
    stopped = grade(model, PROMPT, ref[:1], ref)  # the method's output stops where the reference goes on
    assert stopped["grade"] == "mismatch" and stopped["first_divergence"] == 1 and stopped["method_gap"] is None
    assert stopped["ref_margin"] == pytest.approx(0.0, abs=stopped["tolerance"])  # exact tie of best and rival


def test_runner_records_the_grade_and_keeps_the_old_fields(tmp_path):
    model, ref, tok = edited_model(torch.bfloat16, shrink_rounds=1)
    store = ReferenceStore(tmp_path, "tiny")
    store.put(PROMPT, 2, ref)
    runner = SimpleNamespace(
        cfg=OmegaConf.create({"run": {"check_lossless": True, "max_new_tokens": 2}}), temperature=0.0,
        references=store, is_reference=False,
        bundle=SimpleNamespace(model=model, device=torch.device("cpu"), dtype=torch.bfloat16))
    same = Runner.reference(runner, PROMPT, ref)
    assert same == {"equal": True, "first_divergence": None, "reference": "ar", "grade": "identical",
                    "ref_margin": None, "method_gap": None, "tolerance": None, "dtype": "bfloat16"}
    near = Runner.reference(runner, PROMPT, [ref[0], tok["rival"]])
    assert near["equal"] is False and near["first_divergence"] == 1 and near["reference"] == "ar"
    assert near["grade"] == "near-tie" and near["dtype"] == "bfloat16"
    assert {"ref_margin", "method_gap", "tolerance"} <= near.keys()


def checked(grade_, dtype="bfloat16"):
    return {"equal": grade_ == "identical", "first_divergence": None if grade_ == "identical" else 5,
            "reference": "ar", "grade": grade_, "dtype": dtype}


def summary_of(lossless: list) -> dict:
    return metrics.summarize([{"question_id": i, "new_tokens": 1, "wall_time": 1.0, "accept_lengths": [1],
                               "phase_times": {}, "lossless": c} for i, c in enumerate(lossless)])["lossless"]


def test_summary_counts_the_three_grades_and_old_records():
    got = summary_of([checked("identical")] * 17 + [checked("near-tie")] * 2 + [checked("mismatch"), None])
    assert {k: got[k] for k in ("checked", "equal", "identical", "near_tie", "mismatch")} == {
        "checked": 20, "equal": 17, "identical": 17, "near_tie": 2, "mismatch": 1}
    assert got["passed"] is False and got["first_divergences"] == [5, 5, 5]
    assert summary_of([checked("identical"), checked("near-tie")])["passed"] is True  # bf16: near-ties pass
    # Records made before grading: equal counts as identical, a divergence as a mismatch.
    old = summary_of([{"equal": True, "first_divergence": None}, {"equal": False, "first_divergence": 3}])
    assert (old["identical"], old["near_tie"], old["mismatch"], old["passed"]) == (1, 0, 1, False)
    assert summary_of([None])["passed"] is None  # nothing checked (T > 0)


def test_float32_divergence_is_not_lossless_even_at_a_near_tie():
    fp32 = summary_of([checked("identical", "float32"), checked("near-tie", "float32")])
    assert fp32["near_tie"] == 1 and fp32["passed"] is False
    assert summary_of([checked("identical", "float32")] * 2)["passed"] is True


def test_printed_line_and_report_column_show_near_ties_and_mismatches(tmp_path, capsys):
    counts = summary_of([checked("identical")] * 18 + [checked("near-tie")] * 2)
    assert lossless_text(counts) == "18/20 (2 near-tie, 0 mismatch)"
    assert lossless_text(summary_of([checked("identical")] * 3)) == "3/3"  # all identical: as before
    assert lossless_text({"checked": 4, "equal": 3}) == "3/4"  # a summary written before grading
    summary = {"method": "pld", "batch_size": 1, "speedup": {}, "summary": {
        "mat": 1.5, "tokens_per_s": {"mean_of_questions": 10.0}, "overhead_share": 0.1, "lossless": counts}}
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    print_summary(tmp_path)
    assert "lossless 18/20 (2 near-tie, 0 mismatch)," in capsys.readouterr().out
    summary.update(provenance={"dtype": "float32"})  # the same near-ties in float32: a failure, and said so
    fp32 = [checked("identical", "float32")] * 18 + [checked("near-tie", "float32")] * 2
    summary["summary"]["lossless"] = summary_of(fp32)
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    print_summary(tmp_path)
    assert "lossless 18/20 (2 near-tie, 0 mismatch) — not lossless in float32," in capsys.readouterr().out
