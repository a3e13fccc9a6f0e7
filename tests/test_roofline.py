"""bench.perf.roofline without a model: what a forward reads and computes, the roofline maths, the table, and the
measuring helpers on tiny sizes (seconds in all)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch import nn

from bench.models.linear_backend import backend_of, onednn_available, set_backend
from bench.perf import roofline
from tests.conftest import tiny_llama


class TinyLM(nn.Module):
    """An embedding, two blocks of (norm, linear) and an output head, tied to the embedding or not."""

    def __init__(self, vocab=50, hidden=8, inner=12, tied=True):
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.norm = nn.LayerNorm(hidden)
        self.up = nn.Linear(hidden, inner, bias=False)
        self.down = nn.Linear(inner, hidden, bias=True)
        self.head = nn.Linear(hidden, vocab, bias=False)
        if tied:
            self.head.weight = self.embed.weight

    def get_output_embeddings(self):
        return self.head


def expected_bytes(vocab=50, hidden=8, inner=12) -> int:
    # head (vocab x hidden) + norm weight and bias + up + down weight and bias; the embedding table is not read
    return 4 * (vocab * hidden + 2 * hidden + hidden * inner + inner * hidden + hidden)


@pytest.mark.parametrize("tied", [True, False])
def test_weight_bytes_count_the_head_once_and_skip_the_table(tied):
    assert roofline.weight_bytes(TinyLM(tied=tied)) == expected_bytes()


def test_flops_per_token_are_twice_the_linear_multiply_adds():
    assert roofline.flops_per_token(TinyLM()) == 2 * (8 * 12 + 12 * 8 + 8 * 50)


@pytest.mark.skipif(not onednn_available(), reason="torch without oneDNN")
def test_prepacked_model_reads_and_computes_the_same():
    model = TinyLM()
    set_backend(model, "onednn")
    assert roofline.weight_bytes(model) == expected_bytes()
    assert roofline.flops_per_token(model) == 2 * (8 * 12 + 12 * 8 + 8 * 50)


def test_roofline_is_memory_bound_below_the_ridge_and_compute_bound_above():
    nbytes, flops, bw, peak = 500e6, 250e6, 25e9, 200e9
    ridge = roofline.ridge_tokens(nbytes, flops, bw, peak)
    assert ridge == pytest.approx(16.0)
    curve = roofline.roofline_curve(range(1, 129), nbytes, flops, bw, peak)
    assert curve[1] == curve[16] == pytest.approx(0.02)  # 500 MB at 25 GB/s
    assert curve[64] == pytest.approx(64 * 250e6 / 200e9)
    assert all(curve[n] <= curve[n + 1] for n in range(1, 128))


def test_best_and_median_rates():
    r = roofline.best_and_median([2.0, 1.0, 4.0], work=8.0)
    assert r == {"best": 8.0, "median": 4.0}


def test_goal_values_and_table():
    sizes = roofline.SIZES
    plain = {n: 0.04 + 0.002 * n for n in sizes}
    chosen = {n: 0.02 + 0.001 * n for n in sizes}
    roof = {n: 0.017 for n in sizes}
    goals = roofline.goal_values(plain, chosen, roof)
    assert set(goals) == set(roofline.GOALS)
    assert goals["forward_t1_chosen_vs_plain"] == pytest.approx(0.021 / 0.042)
    assert goals["forward_t8_over_t1_chosen"] == pytest.approx(0.028 / 0.021)
    assert goals["forward_vs_roofline_n64"] == pytest.approx(0.084 / 0.017)
    table = roofline.format_table(plain, chosen, roof, "onednn").splitlines()
    assert len(table) == 1 + len(sizes)
    assert "T_onednn ms" in table[0]
    assert table[1].split()[:4] == ["1", "42.00", "21.00", "17.00"]


def test_bandwidth_and_gemm_rates_are_positive():
    bw = roofline.stream_bandwidth(nbytes=1 << 20, repeats=2)
    assert bw["bytes"] == 1 << 20
    assert bw["copy"]["best"] > 0 and bw["read"]["best"] > 0
    assert bw["roofline"] == max(bw["copy"]["best"], bw["read"]["best"])
    assert bw["copy"]["best"] >= bw["copy"]["median"]
    gemm = roofline.gemm_peak(size=64, repeats=2)
    assert gemm["best"] > 0 and gemm["best"] >= gemm["median"]


def test_compare_ops_without_compile_is_close_to_float64():
    ops = roofline.compare_ops({"head": (40, 16)}, rows=(1, 3), reps=2, compile_linear=False)
    assert ops["compile_note"] == "--no-compile"
    for r in (1, 3):
        per = ops["ops"]["head"][r]
        assert per["plain"]["max_abs_err"] < 1e-5 and per["plain"]["ms"] > 0
        if onednn_available():
            assert per["onednn"]["max_abs_err"] < 1e-5
        assert per["compile"]["ms"] is None and per["compile"]["skipped"] == "--no-compile"
    assert "head" in roofline.format_ops(ops)


def test_op_shapes_from_config_or_defaults():
    class Cfg:
        hidden_size, vocab_size, intermediate_size = 64, 1000, 256

    assert roofline.op_shapes(Cfg()) == {"lm_head": (1000, 64), "mlp_up": (256, 64)}
    assert roofline.op_shapes(object()) == {"lm_head": (49152, 576), "mlp_up": (1536, 576)}


def test_plot_writes_one_png_and_no_temp_files(tmp_path):
    t = {"plain": {1: 0.04, 8: 0.06}, "onednn": {1: 0.02, 8: 0.025}}
    path = roofline.plot(tmp_path / "figures" / "forward_cost.png", t, {1: 0.017, 8: 0.017}, "tiny")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for p in path.parent.iterdir()] == ["forward_cost.png"]


def test_engine_bench_checks_forward_goals_as_upper_bounds(capsys):
    from bench.perf import engine_bench

    result = {"forward_t8_over_t1_chosen": 1.2, "forward_vs_roofline_n1": 1.5, "ar_vs_hf_generate_unmodified": 1.7}
    engine_bench.print_goals(result)
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()}
    assert set(lines) == set(result)
    assert lines["forward_t8_over_t1_chosen"].endswith("met") and "<= 1.25" in lines["forward_t8_over_t1_chosen"]
    assert lines["forward_vs_roofline_n1"].endswith("MISSED")
    assert lines["ar_vs_hf_generate_unmodified"].endswith("met") and ">= 1.60" in lines["ar_vs_hf_generate_unmodified"]


@pytest.mark.skipif(not onednn_available(), reason="torch without oneDNN")
def test_section_on_a_tiny_llama(tmp_path):
    """The whole forward section on a randomly initialised 2-layer Llama: T(n) per backend, roofline, ops, figure;
    the model is left on its own backend."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=300, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=512,
                      tie_word_embeddings=True)
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).eval()
    set_backend(model, "onednn")
    bundle = SimpleNamespace(model=model, device=torch.device("cpu"), dtype=torch.float32, vocab_size=300,
                             linear_backend="onednn", name="tiny-llama")
    args = SimpleNamespace(roof_mb=1, gemm_size=64, roof_repeats=2, prefix_tokens=16, cost_reps=2, op_reps=1,
                           no_compile=True, figure=str(tmp_path / "forward_cost.png"))
    sec = roofline.section(bundle, args)
    d = sec["details"]
    assert set(sec["goals"]) == set(roofline.GOALS)
    assert set(d["forward_s"]) == {"plain", "onednn"}
    assert list(d["forward_s"]["onednn"]) == [str(n) for n in roofline.SIZES]
    assert d["weight_bytes"] == 4 * sum(p.numel() for p in model.parameters())  # tied: the table is the head
    assert len(d["roofline_s"]) == 128
    assert (tmp_path / "forward_cost.png").exists()
    assert backend_of(model) == "onednn"


def test_cache_share_times_both_kinds_of_cache():
    from bench.perf.cache_bench import cache_share

    share = cache_share(tiny_llama(), contexts=(16,), reps=1)
    assert set(share[16]) == {"dynamic", "preallocated"}
    assert all(v["append_ms"] > 0 and v["forward_ms"] > 0 and v["share"] > 0 for v in share[16].values())
