"""Medusa heads: untrained = lm_head, label alignment (head i learns token t+2+i), Medusa checkpoints (counts from
the keys), trained folders (missing, corrupt, loaded once), self-distillation data (generate's hidden states =
teacher-forced ones), and `make heads` end to end on a tiny random Llama (bench/models/heads.py,
bench/train/heads*.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from bench.errors import HarnessError
from bench.models.heads import (
    CONFIG,
    HUB_FILE,
    WEIGHTS,
    MedusaHeads,
    heads_dir,
    init_heads,
    read_medusa_checkpoint,
)
from bench.models.loading import ModelBundle
from bench.train.heads import (
    IGNORE,
    REPORT,
    build_heads,
    head_accuracy,
    head_labels,
    read_report,
    summary,
    train_heads,
    write_heads,
)
from bench.train.heads_data import distil_responses, load_selfdistill
from tests.conftest import compose_cfg, tiny_llama

V, H = 64, 32


@pytest.fixture(scope="module")
def tiny():
    return tiny_llama(V)


def bundle_for(model, heads_cfg, model_cache) -> ModelBundle:
    return ModelBundle(name="tiny", model=model, tokenizer=None, device=torch.device("cpu"), dtype=torch.float32,
                       vocab_size=model.config.vocab_size, eos_token_ids=[0], pad_token_id=0, max_context=128,
                       source="test", heads_cfg=None if heads_cfg is None else OmegaConf.create(heads_cfg),
                       model_cache=str(model_cache))


def one_line_error(bundle) -> str:
    with pytest.raises(HarnessError) as err:
        bundle.load_heads()
    assert "\n" not in str(err.value)
    return str(err.value)


# -- the module -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shared", [True, False], ids=["shared", "per_head"])
def test_untrained_heads_are_the_lm_head(tiny, shared):
    lm_head = tiny.get_output_embeddings()
    heads = init_heads(lm_head, 3, shared=shared)
    x = torch.randn(2, 4, H)
    with torch.inference_mode():
        out = heads(x)
        assert out.shape == (3, 2, 4, V)
        assert all(torch.equal(out[i], lm_head(x)) for i in range(3))
        fresh = MedusaHeads(H, V, 3, lm_head=lm_head)  # the constructor alone: zero blocks too
        assert torch.equal(fresh(x), out)
    keys = set(heads.state_dict())
    assert {k for k in keys if k.startswith("proj.")} == (set() if shared else {f"proj.{i}.weight" for i in range(3)})
    if not shared:  # copies, not views of the target's weights
        assert heads.proj[0].weight.data_ptr() != lm_head.weight.data_ptr() != heads.proj[1].weight.data_ptr()


def test_head_labels_are_the_token_t_plus_2_plus_i():
    # Two responses: positions 0-3 and 4-9. tokens[n] is the token after position n (t+1).
    tokens = torch.tensor([10, 11, 12, 13, 20, 21, 22, 23, 24, 25])
    labels = head_labels(tokens, torch.tensor([0, 4, 10]), 3)
    x = IGNORE
    assert labels.tolist() == [
        [11, 12, 13, x, 21, 22, 23, 24, 25, x],  # head 0: t+2 = tokens[n + 1]
        [12, 13, x, x, 22, 23, 24, 25, x, x],  # head 1: t+3 = tokens[n + 2]
        [13, x, x, x, 23, 24, 25, x, x, x],  # head 2: t+4; never across a response boundary
    ]


@pytest.mark.parametrize("shared", [True, False], ids=["shared", "per_head"])
def test_heads_learn_a_deterministic_sequence_at_t_plus_2_plus_i(tiny, shared):
    """A periodic sequence fixes every future token: trained heads must predict exactly token t+2+i."""
    period = [7, 3, 50, 12, 41, 29, 18]
    seq = torch.tensor(period * 9)
    with torch.inference_mode():
        hidden = tiny.model(input_ids=seq[None]).last_hidden_state[0, :-1].clone()  # positions 0..n-2
    tokens = seq[1:]  # the token after each position
    heads = init_heads(tiny.get_output_embeddings(), 3, shared=shared)
    labels = head_labels(tokens, torch.tensor([0, len(tokens)]), 3)
    recipe = {"batch_positions": 64, "lr": 3e-2, "max_minutes": 5, "max_steps": 150, "warmup_steps": 5,
              "log_every": 50, "seed": 0}
    result = train_heads(heads, hidden, labels, recipe, progress_bar=False)
    assert result["steps"] == 150 and len(result["loss_curve"]) == 3
    assert result["loss_curve"][-1]["loss"] < 0.1 * result["loss_curve"][0]["loss"]
    with torch.inference_mode():
        top1 = heads(hidden).argmax(-1)  # [3, positions]
    for i in range(3):
        n = len(tokens) - 1 - i  # positions whose token t+2+i exists
        assert torch.equal(top1[i, :n], seq[2 + i : 2 + i + n]), f"head {i}"
    assert all(a["top1"] == 1.0 for a in head_accuracy(heads, hidden, labels))
    assert not heads.training and not any(p.requires_grad for p in heads.parameters())
    assert tiny.lm_head.weight.requires_grad and tiny.lm_head.weight.grad is None  # frozen only while training


# -- Medusa checkpoints -----------------------------------------------------------------------------------


def medusa_state(num_heads: int, layers: int = 1, seed: int = 0) -> dict:
    g = torch.Generator().manual_seed(seed)
    state = {}
    for h in range(num_heads):
        for layer in range(layers):
            state[f"{h}.{layer}.linear.weight"] = torch.randn(H, H, generator=g) * 0.1
            state[f"{h}.{layer}.linear.bias"] = torch.randn(H, generator=g) * 0.1
        state[f"{h}.{layers}.weight"] = torch.randn(V, H, generator=g)
    return state


@pytest.mark.parametrize("num_heads,layers", [(3, 1), (4, 2)])
def test_medusa_checkpoint_counts_come_from_the_keys(tmp_path, tiny, num_heads, layers):
    state = medusa_state(num_heads, layers)
    torch.save(state, tmp_path / HUB_FILE)
    heads = read_medusa_checkpoint(tmp_path / HUB_FILE, "test heads")
    assert (heads.num_heads, heads.num_layers, heads.shared) == (num_heads, layers, False)
    x = torch.randn(5, H)
    with torch.inference_mode():
        for h in range(num_heads):
            y = x
            for layer in range(layers):
                w, b = state[f"{h}.{layer}.linear.weight"], state[f"{h}.{layer}.linear.bias"]
                y = y + torch.nn.functional.silu(y @ w.T + b)
            assert torch.allclose(heads(x)[h], y @ state[f"{h}.{layers}.weight"].T, atol=1e-5)
    # through a model config (source: path), whatever num_heads the config claims
    cfg = {"name": "m", "source": "path", "id": str(tmp_path), "num_heads": 5}
    loaded = bundle_for(tiny, cfg, tmp_path / "models").load_heads()
    assert loaded.num_heads == num_heads and not loaded.training and loaded.name_or_path == f"path:{tmp_path}"


def test_bad_medusa_checkpoints_are_one_line(tmp_path, tiny, monkeypatch):
    bad = {
        "missing_bias": {k: v for k, v in medusa_state(3).items() if k != "1.0.linear.bias"},
        "extra_key": {**medusa_state(2), "medusa_head.config": torch.zeros(1)},
        "gap": {k: v for k, v in medusa_state(3).items() if not k.startswith("1.")},
    }
    for name, state in bad.items():
        torch.save(state, tmp_path / f"{name}.pt")
        cfg = {"name": name, "source": "path", "id": str(tmp_path / f"{name}.pt")}
        assert one_line_error(bundle_for(tiny, cfg, tmp_path)).startswith(f"heads '{name}': "), name
    torch.save(medusa_state(2), tmp_path / "wide.pt")
    small = tiny_llama(V - 8)
    assert "vocabulary 64" in one_line_error(bundle_for(small, {"source": "path", "id": str(tmp_path / "wide.pt")},
                                                        tmp_path))
    import huggingface_hub.constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    hub = {"name": "h", "source": "hub", "id": "nobody/no-such-medusa-heads"}
    assert one_line_error(bundle_for(tiny, hub, tmp_path)).startswith(
        f"cannot get Medusa heads 'nobody/no-such-medusa-heads' ({HUB_FILE}) from the hub: ")
    assert one_line_error(bundle_for(tiny, None, tmp_path)) == "model 'tiny' has no Medusa heads (set model.heads)"
    assert one_line_error(bundle_for(tiny, {**hub, "source": "pigeon"}, tmp_path)).startswith("unknown heads source")


# -- trained folders --------------------------------------------------------------------------------------

TRAINED = {"name": "tiny-medusa", "source": "trained", "id": "tiny-medusa"}
REPORT_STUB = {"target_source": "test:tiny", "x": 1}


def trained_heads(tiny, shared: bool = True) -> MedusaHeads:
    heads = init_heads(tiny.get_output_embeddings(), 3, shared=shared)
    for block in heads.blocks:
        torch.nn.init.normal_(block[0].linear.weight, std=0.3)
    return heads


def test_missing_trained_heads_name_make_heads(tmp_path, tiny):
    cache = tmp_path / "models"
    path = heads_dir(cache) / "tiny-medusa"
    assert one_line_error(bundle_for(tiny, TRAINED, cache)) == (
        f"heads 'tiny-medusa' are not built: run `make heads MODEL=tiny` (looked in {path})")


@pytest.mark.parametrize("shared", [True, False], ids=["shared", "per_head"])
def test_trained_heads_are_loaded_once_and_equal(tmp_path, tiny, shared):
    cache = tmp_path / "models"
    heads = trained_heads(tiny, shared)
    write_heads(heads, REPORT_STUB, heads_dir(cache) / "tiny-medusa")
    assert json.loads((heads_dir(cache) / "tiny-medusa" / CONFIG).read_text())["shared_lm_head"] == shared
    bundle = bundle_for(tiny, TRAINED, cache)
    loaded = bundle.load_heads()
    assert bundle.load_heads() is loaded and not loaded.training
    assert loaded.shared == shared and (not shared or loaded.lm_head is tiny.get_output_embeddings())
    x = torch.randn(3, H)
    with torch.inference_mode():
        assert torch.equal(loaded(x), heads(x))
    assert read_report(heads_dir(cache) / "tiny-medusa") == REPORT_STUB
    # recorded with its build's digest: heads trained again under the same id are other heads
    name = loaded.name_or_path
    assert name.startswith("trained:tiny-medusa-") and len(name) == len("trained:tiny-medusa-") + 8
    write_heads(heads, {**REPORT_STUB, "x": 2}, heads_dir(cache) / "tiny-medusa")
    assert bundle_for(tiny, TRAINED, cache).load_heads().name_or_path != name


def test_corrupt_trained_heads_are_reported_not_a_traceback(tmp_path, tiny, capfd):
    cache = tmp_path / "models"
    out = heads_dir(cache) / "tiny-medusa"
    write_heads(trained_heads(tiny), REPORT_STUB, out)
    weights = out / WEIGHTS
    weights.write_bytes(weights.read_bytes()[:-100])  # cut off
    message = one_line_error(bundle_for(tiny, TRAINED, cache))
    assert message.startswith(f"trained heads 'tiny-medusa' ({out}) is corrupt (") and message.endswith(
        "rebuild it with `make heads MODEL=tiny`")
    assert read_report(out) is None  # so `make heads` rebuilds it
    err = [ln for ln in capfd.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and err[0].startswith(f"cache: trained heads {out} is corrupt")
    (out / CONFIG).write_text("{")
    assert "is corrupt (JSONDecodeError" in one_line_error(bundle_for(tiny, TRAINED, cache))


# -- self-distillation data -------------------------------------------------------------------------------


def test_generate_hidden_states_equal_teacher_forced_ones(tiny):
    """Both ways of getting hidden states agree, and the tokens are the target's unbatched greedy outputs."""
    g = torch.Generator().manual_seed(3)
    prompts = [torch.randint(3, V, (n,), generator=g).tolist() for n in (5, 9, 3, 7, 6)]
    recipe = {"max_new_tokens": 10, "generate_batch_size": 2, "hidden_dtype": "float32"}
    eos = [4]
    got = {mode: distil_responses(tiny, prompts, {**recipe, "hidden_states": mode}, eos, 0, progress_bar=False)
           for mode in ("generate", "teacher_forced")}
    (a, stats), (b, tf_stats) = got["generate"], got["teacher_forced"]
    assert torch.equal(a.offsets, b.offsets) and torch.equal(a.tokens, b.tokens)
    assert torch.allclose(a.hidden, b.hidden, atol=1e-4) and tf_stats["greedy_mismatch"] == 0
    assert stats["responses"] == 5 and stats["response_tokens"] == int(a.offsets[-1])
    with torch.inference_mode():
        for r, p in enumerate(prompts):
            ref = tiny.generate(torch.tensor([p]), max_new_tokens=10, do_sample=False, eos_token_id=eos,
                                pad_token_id=0)[0, len(p):].tolist()
            assert a.tokens[a.offsets[r] : a.offsets[r + 1]].tolist() == ref[: int(a.offsets[r + 1] - a.offsets[r])]
            assert ref[int(a.offsets[r + 1] - a.offsets[r]) - 1] in eos or a.offsets[r + 1] - a.offsets[r] == 10


HUMANEVAL_0 = "Check if in given list of numbers, are any two numbers closer to each other than given threshold."


@pytest.fixture(scope="module")
def smol_tokenizer():
    from bench.models.loading import load_tokenizer

    return load_tokenizer(compose_cfg("model=smollm2-135m").model)


def tiny_model_cfg(mirror: Path, **recipe) -> OmegaConf:
    rows = [{"instruction": f"Question {i}: name a colour you like and say why."} for i in range(12)]
    rows[5]["instruction"] = "Please answer: " + HUMANEVAL_0  # shares 12 words with HumanEval: dropped
    (mirror / "chat").mkdir(parents=True, exist_ok=True)
    (mirror / "chat" / "chat.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    train = {"sources": [{"name": "chat", "mirror_path": "chat/chat.jsonl", "format": "jsonl",
                          "prompt": "{instruction}", "heldout_every": 4}],
             "disjoint_from": [{"dataset": "humaneval"}], "max_new_tokens": 8, "generate_batch_size": 4,
             "lr": 1e-3, "warmup_steps": 1, "batch_positions": 16, "loss_weights": [1.0, 0.8],
             "max_minutes": 5, "max_steps": 3, "log_every": 2, "cost_reps": 2, "seed": 0, **recipe}
    return OmegaConf.create({"name": "tiny", "target": {"source": "path", "id": "x"}, "dtype": "float32",
                             "chat_template": "tokenizer",
                             "heads": {**TRAINED, "num_heads": 2, "shared_lm_head": True, "train": train}})


def test_build_heads_end_to_end(tmp_path, smol_tokenizer, capfd, monkeypatch):
    """Data (split, decontaminated, cached), training, report, atomic folder, loadable; the cache is reused and a
    damaged one is rebuilt."""
    from bench.train import heads_data

    target = tiny_llama(len(smol_tokenizer))
    model_cfg = tiny_model_cfg(tmp_path / "mirror")
    out = heads_dir(tmp_path / "models") / "tiny-medusa"
    args = (target, smol_tokenizer, model_cfg, out, str(tmp_path / "mirror"), str(tmp_path / "cache"))
    report = build_heads(*args, progress_bar=False)
    assert json.loads((out / REPORT).read_text()) == report
    assert report["steps"] == 3 and [c["step"] for c in report["loss_curve"]] == [2, 3]
    assert [a["predicts"] for a in report["accuracy"]] == ["t+2", "t+3"]
    assert all(0 <= a[f"top{k}"] <= 1 for a in report["accuracy"] for k in (1, 5, 10))
    assert report["cost"]["heads_s"] > 0 and report["cost"]["target_step_s"] > 0
    counts = report["data"]["sources"]["chat"]
    assert (counts["train"], counts["heldout"], counts["dropped_overlapping_eval"]) == (8, 3, 1)
    assert report["data"]["train"]["responses"] == 8 and report["data"]["heldout"]["responses"] == 3
    assert "held-out accuracy" in summary(report) and "head 1 (t+3)" in summary(report)
    data_dir = Path(report["data"]["cache"])
    assert data_dir.parent == out.parent / "selfdistill"
    assert sorted(p.name for p in out.parent.iterdir()) == ["selfdistill", "tiny-medusa"]
    bundle = bundle_for(target, TRAINED, tmp_path / "models")
    assert bundle.load_heads().num_heads == 2

    def no_generation(*a, **k):
        raise AssertionError("the target ran again")

    monkeypatch.setattr(heads_data, "distil_responses", no_generation)
    again = build_heads(*args, progress_bar=False)  # new heads, same cached data
    assert again["data"]["train"] == report["data"]["train"]
    monkeypatch.undo()
    (data_dir / "selfdistill.json").write_text("{")
    capfd.readouterr()
    build_heads(*args, progress_bar=False)
    err = [ln for ln in capfd.readouterr().err.splitlines() if ln.startswith("cache:")]
    assert len(err) == 1 and "self-distillation data" in err[0] and err[0].endswith("rebuilding")
    key = json.loads((data_dir / "selfdistill.json").read_text())["key"]
    assert load_selfdistill(data_dir, key).train.tokens.numel() == report["data"]["train_positions"]


# -- the script -------------------------------------------------------------------------------------------


def test_script_errors_are_one_line(capsys):
    from scripts.train_heads import main

    assert main(["--bogus"]) == 2
    assert main(["model=no-such-model"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(line.startswith("error: ") for line in err)


def test_script_gives_hub_heads_models_the_reference_recipe():
    from scripts.train_heads import with_trained_heads

    smol = compose_cfg("model=smollm2-135m").model
    same, hint = with_trained_heads(smol)
    assert same is smol and hint is None and smol.heads.shared_lm_head and smol.heads.num_heads == 5
    vicuna = compose_cfg("model=vicuna-7b").model
    assert vicuna.heads.source == "hub" and vicuna.heads.id == "FasterDecoding/medusa-vicuna-7b-v1.3"
    cfg, hint = with_trained_heads(vicuna)
    assert cfg.heads.source == "trained" and cfg.heads.id == "vicuna-7b-medusa" and "vicuna-7b-medusa" in hint
    assert OmegaConf.to_container(cfg.heads.train) == OmegaConf.to_container(smol.heads.train)
    assert compose_cfg("model=codellama-7b").model.get("heads") is None  # heads are optional
