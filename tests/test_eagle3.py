"""EAGLE-3 (methods/eagle3, bench/models/eagle3.py): the three layers' states the engine hands over are the ones
output_hidden_states gives (a wrong layer fails), through the full and the layer-wise forward; a head trained on
the tiny target's own continuations over a reduced draft vocabulary drafts what the target accepts (so d2t maps
drafts to the right target ids); eagle3 is token-identical to greedy AR at batch 1 and batch > 1, reproducible at
T > 0; the head saves and loads in the official layout, and a missing head is one error line. On the real model an
untrained head is lossless at batch 1 and 2."""

from __future__ import annotations

import functools
from types import SimpleNamespace

import pytest
import torch
from omegaconf import OmegaConf

from bench.core.engine import Engine
from bench.core.forward import LayerwiseForward
from bench.core.timing import PhaseTimer
from bench.errors import HarnessError
from bench.models.eagle3 import Eagle3Head, default_layers, load_eagle3, save_head
from methods import build_method
from tests.conftest import compose_cfg, tiny_llama

V, NO_EOS = 64, 10_000
SMALL = ("method.total_tokens=12", "method.depth=4", "method.topk=4")


def per_token_target():
    """A tiny Llama whose attention outputs are zeroed: its next token depends on the current token alone, so a
    head that reads the right token can predict it."""
    target = tiny_llama(V, max_positions=512)
    with torch.no_grad():
        for layer in target.model.layers:
            layer.self_attn.o_proj.weight.zero_()
    return target


def bundle_for(target, head=None):
    return SimpleNamespace(model=target, device=torch.device("cpu"), dtype=torch.float32, vocab_size=V, name="tiny",
                           eos_token_ids=[NO_EOS], max_context=512, load_eagle3=lambda: head)


@functools.cache
def method_cfg(name: str):
    return compose_cfg(f"method={name}").method  # composed once: Hydra's composition costs ~0.4 s


def eagle3(bundle, *overrides: str):
    """overrides: "method.key=value" settings."""
    settings = OmegaConf.from_dotlist([o.removeprefix("method.") for o in overrides])
    return build_method(OmegaConf.merge(method_cfg("eagle3"), settings), bundle)


def fused(target, seqs: torch.Tensor, layers) -> torch.Tensor:
    """The reference: output_hidden_states' states at `layers`, concatenated [B, T, 3H]."""
    with torch.no_grad():
        states = target(seqs, output_hidden_states=True).hidden_states
    return torch.cat([states[i] for i in layers], -1)


def continuations(target, n: int, seed: int) -> torch.Tensor:
    prompts = torch.randint(0, V, (n, 4), generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        return target.generate(prompts, attention_mask=torch.ones_like(prompts), max_new_tokens=28, do_sample=False,
                               pad_token_id=0)


def train_head(target, steps: int = 120) -> Eagle3Head:
    """EAGLE-3's first training step in miniature: pairs (g_i, t_{i+1}) -> t_{i+2} on the target's own greedy
    continuations, the draft vocabulary the continuations' tokens (as the official vocabulary scan counts the
    training answers), targets outside it masked."""
    seqs = continuations(target, 64, 0)
    kept = seqs[:, 4:].unique()
    head = Eagle3Head.from_target(target, tokens=kept, seed=0)
    states = fused(target, seqs, head.layers)[:, :-2]
    tokens, labels = seqs[:, 1:-1], head.to_draft(seqs[:, 2:])
    pos = torch.arange(tokens.shape[1])[None]
    opt = torch.optim.Adam(head.parameters(), lr=3e-3)
    for _ in range(steps):
        logits = head.logits(head(tokens, states, pos, None))
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-1)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return head.eval()


@pytest.fixture(scope="module")
def trained():
    target = per_token_target()
    return target, train_head(target)


def decode(method, engine, prompts, new=20):
    if len(prompts) == 1:
        engine.reseed(0)
        return [method.generate(engine, prompts[0], new, PhaseTimer(sync=False))]
    gens = [torch.Generator().manual_seed(i) for i in range(len(prompts))]
    return method.generate_batch(engine, prompts, new, PhaseTimer(sync=False), gens)


PROMPTS = [torch.randint(0, V, (n,), generator=torch.Generator().manual_seed(n)).tolist() for n in (9, 5, 13, 7)]


def test_trained_head_is_accepted_and_lossless_at_batch_1_and_4(trained):
    """d2t maps the drafts to target ids: the head scores 30-odd of the 64 tokens, so unmapped indices would be
    other tokens and rejected. Rows of a batch equal their batch-1 greedy AR outputs."""
    target, head = trained
    assert head.d2t.numel() < V and head.d2t.any()
    bundle = bundle_for(target, head)
    engine = Engine(target, [NO_EOS], 512)
    ar = [decode(build_method(method_cfg("ar"), bundle), engine, [p])[0].output_ids for p in PROMPTS]
    one = {"method.total_tokens=2", "method.depth=1", "method.topk=1"}
    # Depth-1 acceptance, in a chain and in a small tree (deeper levels feed the head its own outputs, which this
    # one-step training never showed it: EAGLE-3's training-time test is what teaches them)
    for settings, least in ((one, 0.75), (SMALL, 0.75)):
        method = eagle3(bundle, *settings)
        steps = []
        for p, ref in zip(PROMPTS, ar, strict=True):
            gen = decode(method, engine, [p])[0]
            assert gen.output_ids == ref
            steps += gen.accept_lengths[1:]
        assert sum(steps) / len(steps) - 1 > least
    rows = decode(eagle3(bundle, *SMALL), engine, PROMPTS)
    assert [r.output_ids for r in rows] == ar and all(max(r.accept_lengths) > 1 for r in rows)
    untrained = Eagle3Head.from_target(target, tokens=head.d2t + torch.arange(head.d2t.numel()), seed=1).eval()
    gens = decode(eagle3(bundle_for(target, untrained), *one), engine, PROMPTS[:1])
    assert gens[0].output_ids == ar[0] and sum(gens[0].accept_lengths[1:]) / len(gens[0].accept_lengths[1:]) < 1.3


def test_sampling_runs_and_is_reproducible(trained):
    target, head = trained
    engine = Engine(target, [NO_EOS], 512, temperature=0.6)
    method = eagle3(bundle_for(target, head), *SMALL)
    runs = [decode(method, engine, prompts, 12) for prompts in (PROMPTS[:1], PROMPTS[:1], PROMPTS[:2], PROMPTS[:2])]
    assert runs[0][0].output_ids == runs[1][0].output_ids
    assert [g.output_ids for g in runs[2]] == [g.output_ids for g in runs[3]]
    assert all(sum(g.accept_lengths) == len(g.output_ids) == 12 for run in runs for g in run)
    assert any(max(g.accept_lengths) > 1 for run in runs for g in run)  # drafts accepted by the stochastic walk


class Recorder:
    """Wraps a proposer's observe_features: every state handed over, in order."""

    def __init__(self, method):
        self.seen = []
        real = method.observe_features
        method.observe_features = lambda f: (self.seen.append(f.clone()), real(f))[1]


def handed_over(method, engine, prompt, new=16):
    """The states observe_features received over a generation (prompt, then each accepted path but the last
    step's, whose row is done), and the committed sequence."""
    record = Recorder(method)
    gen = decode(method, engine, [prompt], new)[0]
    got = torch.cat(record.seen)
    assert len(record.seen) == len(gen.accept_lengths) - 1
    assert got.shape[0] == len(prompt) + sum(gen.accept_lengths[1:-1])
    return got, torch.tensor([prompt + gen.output_ids]), gen


def drop_last(h, ids, trees):
    """A SlotFilter dropping each tree's last slot (breadth first: a leaf)."""
    keep = torch.ones(ids.shape, dtype=torch.bool)
    for b, tree in enumerate(trees):
        keep[b, tree.size] = tree.size == 0
    return keep


@pytest.mark.parametrize("forward", ["full", "layerwise"])
def test_handed_over_states_are_output_hidden_states(trained, forward):
    """The states handed over equal output_hidden_states' at the head's layers for the committed positions; at the
    layers one above they do not (mutation). The trained head's drafts are accepted, so accepted paths are longer
    than the root. The layer-wise forward (ProPD's) runs layer 1 on over the kept slots only, dropping each tree's
    last slot, and hands that layer's states back widened to the tree."""
    target, head = trained
    layerwise = {"forward": LayerwiseForward(1, drop_last)} if forward == "layerwise" else {}
    method = eagle3(bundle_for(target, head), *SMALL)
    got, seq, gen = handed_over(method, Engine(target, [NO_EOS], 512, **layerwise), PROMPTS[2])
    assert max(gen.accept_lengths) > 1 and got.shape[1] == 3 * target.config.hidden_size
    assert torch.allclose(got, fused(target, seq, head.layers)[0, : len(got)], atol=1e-5)
    assert not torch.allclose(got, fused(target, seq, [i + 1 for i in head.layers])[0, : len(got)], atol=1e-2)


def test_default_layers_of_a_deeper_target():
    """An 8-layer target (attention on: states depend on the context) fuses the default layers 2, 4 and 5."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=8, num_attention_heads=2,
                      num_key_value_heads=2, max_position_embeddings=512, initializer_range=0.1,
                      attn_implementation="eager")
    target = LlamaForCausalLM(cfg).eval()
    head = Eagle3Head.from_target(target, seed=0).eval()
    assert head.layers == default_layers(8) == (2, 4, 5) and default_layers(30) == (2, 15, 27)
    got, seq, _ = handed_over(eagle3(bundle_for(target, head), *SMALL), Engine(target, [NO_EOS], 512), PROMPTS[0])
    assert torch.allclose(got, fused(target, seq, head.layers)[0, : len(got)], atol=1e-5)
    assert not torch.allclose(got, fused(target, seq, (2, 4, 6))[0, : len(got)], atol=1e-2)


def test_batch_rows_get_their_own_states():
    """At batch 2 (right-padded prefill, then padded trees) each row's states are its own sequence's."""
    target = tiny_llama(V, max_positions=512)
    head = Eagle3Head.from_target(target, seed=0).eval()
    methods = [eagle3(bundle_for(target, head), *SMALL)]
    methods.append(methods[0].fork())
    records = [Recorder(m) for m in methods]
    gens = Engine(target, [NO_EOS], 512).generate_batch(methods, PROMPTS[:2], 12, PhaseTimer(sync=False),
                                                         [torch.Generator(), torch.Generator()])
    for record, gen, prompt in zip(records, gens, PROMPTS, strict=False):
        got, seq = torch.cat(record.seen), torch.tensor([prompt + gen.output_ids])
        assert len(got) == len(prompt) + sum(gen.accept_lengths[1:-1])
        assert torch.allclose(got, fused(target, seq, head.layers)[0, : len(got)], atol=1e-5)


def test_draft_vocabulary_maps_round_trip():
    target = tiny_llama(V)
    kept = torch.tensor([60, 3, 17, 42, 5, 33, 8])
    head = Eagle3Head.from_target(target, tokens=kept, seed=0)
    every = torch.arange(len(kept))
    assert head.to_target(every).tolist() == sorted(kept.tolist())  # ascending, as the official scan stores them
    assert torch.equal(head.to_draft(head.to_target(every)), every)
    assert head.t2d.sum() == len(kept) and head.t2d[kept].all()
    assert (head.to_draft(torch.tensor([0, 1, 63])) == -1).all()
    full = Eagle3Head.from_target(target, seed=0)
    assert torch.equal(full.to_target(torch.arange(V)), torch.arange(V)) and full.t2d.all()


OFFICIAL_KEYS = {"fc.weight", "norm.weight", "lm_head.weight", "d2t", "t2d", *(
    f"midlayer.{m}.weight" for m in ("input_layernorm", "hidden_norm", "post_attention_layernorm", "self_attn.q_proj",
                                     "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj",
                                     "mlp.up_proj", "mlp.down_proj"))}


def test_save_load_round_trip_in_the_official_layout(tmp_path):
    """The saved folder holds the official 15 tensors under their names and shapes (fc [H, 3H], q/k/v [*, 2H],
    lm_head [N, H], d2t [N], t2d [V]); loaded by model config (source: path) it drafts the same."""
    from safetensors.torch import load_file

    target, h = tiny_llama(V), 32
    head = Eagle3Head.from_target(target, tokens=torch.arange(5, 45), seed=3).eval()
    save_head(head, tmp_path / "h")
    state = load_file(str(tmp_path / "h" / "model.safetensors"))
    shapes = {"fc.weight": (h, 3 * h), "midlayer.self_attn.q_proj.weight": (h, 2 * h), "lm_head.weight": (40, h),
              "midlayer.hidden_norm.weight": (h,), "norm.weight": (h,), "d2t": (40,), "t2d": (V,)}
    assert set(state) == OFFICIAL_KEYS and all(tuple(state[k].shape) == s for k, s in shapes.items())
    assert state["d2t"].dtype == torch.long and state["t2d"].dtype == torch.bool
    bundle = SimpleNamespace(eagle3_cfg=OmegaConf.create({"name": "e3", "source": "path", "id": str(tmp_path / "h")}),
                             model=target, name="tiny", device=torch.device("cpu"), dtype=torch.float32,
                             model_cache=str(tmp_path))
    loaded = load_eagle3(bundle)
    args = (torch.tensor([[1, 2, 3]]), torch.randn(1, 3, 3 * h), torch.arange(3)[None], None)
    with torch.no_grad():
        assert torch.equal(loaded.logits(loaded(*args)), head.logits(head(*args)))
    assert torch.equal(loaded.d2t, head.d2t) and loaded.layers == head.layers


def test_a_published_style_checkpoint_loads(tmp_path):
    """As the yuhuili/EAGLE3-* repos ship a head: a plain Llama-style config.json with `draft_vocab_size` (no layer
    ids, rope_theta as a key), pytorch_model.bin with the official keys, an embedding copy that the target's own
    replaces, and over the whole vocabulary no d2t/t2d (the maps are then the identity)."""
    import json

    target, h = tiny_llama(V), 32
    folder = tmp_path / "EAGLE3-tiny"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLMEagle3"], "hidden_size": h, "intermediate_size": 64,
        "num_attention_heads": 2, "num_key_value_heads": 2, "num_hidden_layers": 1, "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0, "max_position_embeddings": 128, "vocab_size": V, "draft_vocab_size": V,
        "hidden_act": "silu", "torch_dtype": "float16", "bias": False}))
    state = {k: v for k, v in Eagle3Head.from_target(target, seed=4).state_dict().items() if k not in ("d2t", "t2d")}
    torch.save({**state, "embed_tokens.weight": torch.zeros(V, h)}, folder / "pytorch_model.bin")
    bundle = SimpleNamespace(eagle3_cfg=OmegaConf.create({"source": "path", "id": str(folder)}), model=target,
                             name="tiny", device=torch.device("cpu"), dtype=torch.bfloat16, model_cache=None)
    loaded = load_eagle3(bundle)
    assert loaded.layers == default_layers(2) and torch.equal(loaded.to_target(torch.arange(V)), torch.arange(V))
    assert loaded.fc.weight.dtype == torch.bfloat16 and loaded.rotary.inv_freq.dtype == torch.float32
    assert torch.equal(loaded.midlayer.mlp.up_proj.weight, state["midlayer.mlp.up_proj.weight"].bfloat16())
    bundle.eagle3_cfg.layers = [1, 1, 0]  # the model config's choice wins
    assert load_eagle3(bundle).layers == (1, 1, 0)
    bundle.eagle3_cfg.layers = [0, 1, 2]
    with pytest.raises(HarnessError, match="layers \\[0, 1, 2\\] for a target of 2 layers"):
        load_eagle3(bundle)


def test_missing_head_is_one_error_line(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    target = tiny_llama(V)
    cases = {
        "hub": ("yuhuili/EAGLE3-LLaMA3.1-Instruct-8B-not-cached",
                "cannot get EAGLE-3 head 'yuhuili/EAGLE3-LLaMA3.1-Instruct-8B-not-cached' from the hub"),
        "trained": ("tiny-e3", "EAGLE-3 head 'tiny-e3' is not built"),
        "path": (str(tmp_path / "none"), "is not a folder"),
    }
    for source, (ident, message) in cases.items():
        bundle = SimpleNamespace(eagle3_cfg=OmegaConf.create({"source": source, "id": ident}), model=target,
                                 name="tiny", device=torch.device("cpu"), dtype=torch.float32,
                                 model_cache=str(tmp_path / "models"))
        with pytest.raises(HarnessError) as err:
            load_eagle3(bundle)
        assert message in str(err.value) and "\n" not in str(err.value)
    bundle.eagle3_cfg = None
    with pytest.raises(HarnessError, match="has no EAGLE-3 head"):
        load_eagle3(bundle)


@pytest.mark.model
def test_lossless_on_the_real_model(smollm, prompts, greedy):
    """An untrained head (model.eagle3.source=init: the whole vocabulary) and the smallest tree keep it cheap: 2 prompts x
    MAX_NEW tokens decoded as a batch of 2, each row equal to its batch-1 greedy output."""
    method = eagle3(smollm, "method.total_tokens=4", "method.depth=2", "method.topk=2")
    assert method.feature_layers == (2, 15, 27)  # SmolLM2's 30 layers
    engine = Engine(smollm.model, smollm.eos_token_ids, smollm.max_context, device=smollm.device)
    rows = method.generate_batch(engine, prompts[:2], len(greedy[0]), PhaseTimer(sync=False),
                                 [torch.Generator().manual_seed(i) for i in range(2)])
    for gen, ref in zip(rows, greedy, strict=False):
        assert gen.output_ids == ref and sum(gen.accept_lengths) == len(gen.output_ids)
