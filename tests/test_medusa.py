"""methods.medusa: Medusa's mc_sim_7b_63 tree, the tree fill from the heads' top-k (a node's token depends only on
its depth and rank), BPD's chain, config checks, per-row copies; lossless against greedy AR on a tiny random model
and on the real embedded model with untrained heads (each head = the lm_head: few acceptances, identical output)."""

from __future__ import annotations

import copy
import dataclasses
from collections import Counter
from types import SimpleNamespace

import pytest
import torch

from bench.core.tree import tree_from_paths
from bench.errors import ConfigError
from bench.models.heads import MedusaHeads
from methods import build_method
from tests.conftest import compose_cfg, tiny_llama

V = 64
NO_EOS = 10_000


def random_heads(model, num_heads: int = 5, shared: bool = True) -> MedusaHeads:
    """Heads with random residual blocks (zero-init blocks would make every head the lm_head)."""
    torch.manual_seed(1)
    lm_head = model.get_output_embeddings() if shared else None
    heads = MedusaHeads(model.config.hidden_size, model.config.vocab_size, num_heads, lm_head=lm_head)
    for block in heads.blocks:
        torch.nn.init.normal_(block[0].linear.weight, std=0.5)
    return heads.eval()


def make_bundle(model, heads):
    return SimpleNamespace(name="tiny", device="cpu", dtype=torch.float32, vocab_size=model.config.vocab_size,
                           model=model, eos_token_ids=[NO_EOS], max_context=512, heads=heads,
                           load_heads=lambda: heads)


def build(bundle, *overrides):
    return build_method(compose_cfg(*overrides).method, bundle)


@pytest.fixture(scope="module")
def tiny():
    return tiny_llama(V)


@torch.inference_mode()
def last_hidden(model, ids: list[int]) -> torch.Tensor:
    """[H] final normed hidden state at the last position (what the engine hands to observe_hidden)."""
    out = model(torch.tensor([ids]), output_hidden_states=True)
    hidden = out.hidden_states[-1][0, -1]
    assert torch.allclose(model.get_output_embeddings()(hidden), out.logits[0, -1], atol=1e-5)
    return hidden


# ---- the tree --------------------------------------------------------------------------------------------

def test_mc_sim_7b_63_tree():
    cfg = compose_cfg("method=medusa").method
    assert cfg.tree.name == "mc_sim_7b_63" and cfg.tree.kind == "template"
    tree = tree_from_paths([list(p) for p in cfg.tree.paths])
    assert tree.size == 63
    assert [b - a for a, b in tree.level_slices] == [10, 28, 23, 2]
    assert int(tree.choice.max()) == 9
    assert sum(1 for kids in tree.children[1:] if not kids) == 42  # leaves
    assert Counter(len(p) for p in cfg.tree.paths) == {1: 10, 2: 28, 3: 23, 4: 2}
    # Medusa's own listing order, first and last entries (implementations.md section 2.2)
    assert [list(p) for p in cfg.tree.paths[:4]] == [[0], [0, 0], [1], [0, 1]]
    assert [list(p) for p in cfg.tree.paths[-3:]] == [[0, 0, 0, 1], [1, 6], [0, 7, 0]]


# ---- the fill --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("shared", [True, False], ids=["shared_lm_head", "own_projections"])
def test_node_token_is_its_depth_heads_rank_choice(tiny, shared):
    heads = random_heads(tiny, shared=shared)
    medusa = build(make_bundle(tiny, heads), "method=medusa")
    assert medusa.wants_hidden and medusa.k == 10 and medusa.depth == 4
    prompt = [3, 9, 14, 1, 7]
    hidden = last_hidden(tiny, prompt)
    medusa.start(prompt)
    medusa.observe_hidden(hidden)
    draft = medusa.propose(torch.tensor(prompt + [0]), len(prompt) + 1)
    with torch.inference_mode():
        logits = heads(hidden)  # [num_heads, V]
    assert draft.tree is medusa.tree and draft.tokens.shape == (63,)
    tree = medusa.tree
    for node in range(1, tree.size + 1):
        d, r = int(tree.depth[node]), int(tree.choice[node])
        assert int(draft.tokens[node - 1]) == int(logits[d - 1].topk(10).indices[r])
    # The rank-0 spine is heads 0..3's argmax in turn (random blocks: the heads disagree).
    assert not torch.equal(logits[0], logits[1])
    top1 = [int(draft.tokens[tree.paths.index((0,) * d)]) for d in range(1, 5)]
    assert top1 == logits[:4].argmax(-1).tolist()
    # Siblings have distinct tokens (distinct ranks of one head).
    for kids in tree.children:
        toks = [int(draft.tokens[k - 1]) for k in kids]
        assert len(set(toks)) == len(toks)


def test_bpd_is_the_chain_of_head_top1(tiny):
    heads = random_heads(tiny)
    prompt = [5, 2, 8]
    hidden = last_hidden(tiny, prompt)
    with torch.inference_mode():
        top1 = heads(hidden).argmax(-1)
    for overrides, n in [((), 5), (("method.draft_length=3",), 3)]:
        bpd = build(make_bundle(tiny, heads), "method=bpd", *overrides)
        bpd.start(prompt)
        bpd.observe_hidden(hidden)
        draft = bpd.propose(torch.tensor(prompt + [1]), 4)
        assert draft.tree.is_chain and draft.tree.size == n
        assert draft.tokens.tolist() == top1[:n].tolist()
        assert bpd.describe()["draft_length"] == n and bpd.describe()["num_heads"] == 5


def test_describe(tiny):
    d = build(make_bundle(tiny, random_heads(tiny)), "method=medusa").describe()
    assert d["tree_size"] == 63 and d["tree_depth"] == 4 and d["num_heads"] == 5 and d["topk"] == 10
    assert d["tree_config"] == "mc_sim_7b_63" and d["tree"].startswith("n63-d4-")
    assert "heads" in d


def test_forks_are_independent(tiny):
    heads = random_heads(tiny)
    medusa = build(make_bundle(tiny, heads), "method=medusa")
    medusa.start([1])
    a, b = copy.copy(medusa), copy.copy(medusa)
    ha, hb = last_hidden(tiny, [1, 2, 3]), last_hidden(tiny, [7, 7, 30, 4])
    a.observe_hidden(ha)
    b.observe_hidden(hb)
    seq = torch.zeros(8, dtype=torch.long)
    da, db = a.propose(seq, 4).tokens, b.propose(seq, 4).tokens
    assert not torch.equal(da, db)
    a.observe_hidden(ha)
    assert torch.equal(a.propose(seq, 4).tokens, da) and medusa.hidden is None
    b.start([1])
    assert b.hidden is None and a.hidden is ha


@pytest.mark.parametrize("overrides", [("method=medusa",), ("method=bpd",),
                                       ("method=propd", "method.prune=false")], ids=["medusa", "bpd", "propd"])
def test_a_batch_drafts_every_row_at_once(tiny, overrides):
    """propose_batch gives each row the draft its own propose would, with one heads forward for the batch: its
    kernel launches do not grow with the rows (at B > 1 two more: the hidden states' stack, the gather's copy)."""
    from bench.core.launches import OpCounter
    from bench.core.proposer import drafts_rows_at_once
    from methods.ar import Autoregressive

    heads = random_heads(tiny)
    bundle = make_bundle(tiny, heads)
    bundle.device = torch.device("cpu")
    method = build(bundle, *overrides)
    assert drafts_rows_at_once(method) and not drafts_rows_at_once(Autoregressive(None, bundle))
    prompts = [[1, 2, 3], [7, 7, 30, 4], [5, 2, 8], [9, 1, 4, 4, 6]]

    def rows(n):
        out = [method] + [method.fork() for _ in prompts[1:n]]
        for p, prompt in zip(out, prompts):
            p.start(prompt)
            p.observe_hidden(last_hidden(tiny, prompt))
        return out

    seqs = [torch.tensor(p + [0]) for p in prompts]
    lengths = [len(p) + 1 for p in prompts]
    alone = [p.propose(seq, n) for p, seq, n in zip(rows(4), seqs, lengths)]
    ops = {}
    for n in (1, 4):
        proposers = rows(n)
        with OpCounter() as counter:
            drafts = method.propose_batch(proposers, seqs[:n], lengths[:n])
        ops[n] = counter.total
        assert len({id(d.tree) for d in drafts}) == 1 and drafts[0].tree is alone[0].tree
        assert [d.tokens.tolist() for d in drafts] == [d.tokens.tolist() for d in alone[:n]]
    assert ops[4] <= ops[1] + 2, ops


@pytest.mark.parametrize("overrides", [("method=bpd",), ("method=propd", "method.prune=false")], ids=["bpd", "propd"])
def test_row_by_row_drafting_is_the_same_decode(tiny, overrides, monkeypatch):
    """bench.perf.draft_batch's other side: a method made to draft each row alone (the base class's propose_batch)
    calls each row's propose and decodes the same tokens as drafting the rows at once."""
    from bench.core.engine import Engine
    from bench.core.timing import PhaseTimer
    from bench.perf.draft_batch import row_by_row

    bundle = make_bundle(tiny, random_heads(tiny))
    bundle.device = torch.device("cpu")
    engine = Engine(tiny, [NO_EOS], max_context=512)
    g = torch.Generator().manual_seed(4)
    prompts = [torch.randint(0, V, (n,), generator=g).tolist() for n in (6, 11, 9)]
    cls, calls = type(build(bundle, *overrides)), Counter()
    propose = cls.propose
    monkeypatch.setattr(cls, "propose", lambda self, seq, n: calls.update([id(self)]) or propose(self, seq, n))
    outs = []
    for method in (build(bundle, *overrides), row_by_row(build(bundle, *overrides))):
        calls.clear()
        gens = method.generate_batch(engine, prompts, 20, PhaseTimer("cpu"), [torch.Generator() for _ in prompts])
        outs.append(([g.output_ids for g in gens], len(calls)))
    assert outs[0][0] == outs[1][0]
    # row by row every row's propose; at once only a row left decoding alone (the engine's batch-1 path)
    assert outs[1][1] == len(prompts) and outs[0][1] < len(prompts)


@pytest.mark.parametrize("argv,match", [(["--methods", "ar"], "method 'ar' does not draft a batch at once"),
                                        (["--batch-sizes", "1,4"], "--batch-sizes '1,4': integers >= 2"),
                                        (["--batch-sizes", "4,x"], "--batch-sizes '4,x'"),
                                        (["--prompts", "2"], "--prompts (at least the largest batch)")])
def test_draft_batch_bad_arguments_are_one_line(argv, match, capsys):
    from bench.perf.draft_batch import main

    assert main(argv) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and match in err[0]


def test_propose_without_observed_hidden_is_an_error(tiny):
    medusa = build(make_bundle(tiny, random_heads(tiny)), "method=medusa")
    medusa.start([1, 2])
    with pytest.raises(RuntimeError, match="observe_hidden"):
        medusa.propose(torch.tensor([1, 2]), 2)


# ---- config errors ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("overrides,num_heads,match", [
    (("method=medusa",), 3, "tree mc_sim_7b_63 is 4 deep but the heads have 3"),
    (("method=medusa", "tree@method.tree=tr_2_2_2"), 5, "tree tr_2_2_2 is 6 deep but the heads have 5"),
    (("method=medusa", "tree@method.tree=built"), 5, "tree.kind must be one of template, got 'built'"),
    (("method=bpd", "method.draft_length=6"), 5, "draft_length 6 must be between 1 and the heads' 5"),
    (("method=bpd", "method.draft_length=0"), 5, "draft_length must be an integer >= 1 or null, got 0"),
], ids=["mc_sim_3_heads", "tr_2_2_2", "built", "bpd_too_long", "bpd_zero"])
def test_config_errors_are_one_line(tiny, overrides, num_heads, match):
    with pytest.raises(ConfigError, match=match) as err:
        build(make_bundle(tiny, random_heads(tiny, num_heads)), *overrides)
    assert "\n" not in str(err.value)


# ---- end to end through the engine (observe_hidden) ------------------------------------------------------

@pytest.fixture
def checked(monkeypatch, tiny):
    """At temperature 0 the hidden state a proposer observed must be the one whose lm_head argmax is the root:
    every propose of HeadsProposer, and every row of its propose_batch (a batch's), checks it; returns the count of
    checks per proposer."""
    # A class is a subclass only once its module is imported: the methods load lazily, so without this import the
    # patch depended on which tests this worker had run first.
    import methods.medusa.proposer  # noqa: F401
    from methods.shared.heads import HeadsProposer

    lm_head, counts = tiny.get_output_embeddings(), Counter()
    for cls in HeadsProposer.__subclasses__():
        def propose(self, seq, length, _inner=cls.propose):
            assert int(lm_head(self.hidden).argmax()) == int(seq[length - 1])
            counts[id(self)] += 1
            return _inner(self, seq, length)

        def propose_batch(self, proposers, seqs, lengths, _inner=cls.propose_batch):
            for p, seq, length in zip(proposers, seqs, lengths):
                assert int(lm_head(p.hidden).argmax()) == int(seq[length - 1])
                counts[id(p)] += 1
            return _inner(self, proposers, seqs, lengths)

        monkeypatch.setattr(cls, "propose", propose)
        monkeypatch.setattr(cls, "propose_batch", propose_batch)
    return counts


@pytest.mark.parametrize("overrides", [("method=medusa",), ("method=bpd",), ("method=bpd", "method.draft_length=2")],
                         ids=["medusa", "bpd", "bpd2"])
def test_tiny_identical_to_greedy_ar(tiny, overrides, checked):
    from bench.core.engine import Engine
    from bench.core.timing import PhaseTimer
    from methods.ar import Autoregressive

    g = torch.Generator().manual_seed(3)
    prompts = [torch.randint(0, V, (10,), generator=g).tolist() for _ in range(3)] + [[4, 5, 6] * 4]
    bundle = make_bundle(tiny, random_heads(tiny))
    # untrained heads (zero blocks: every head is the lm_head) accept on repetitions, so some steps are > 1
    untrained = make_bundle(tiny, MedusaHeads(32, V, 5, lm_head=tiny.get_output_embeddings()).eval())
    engine = Engine(tiny, [NO_EOS], max_context=512)
    accepted = 0
    for b in (bundle, untrained):
        method = build(b, *overrides)
        for p in prompts:
            ref = Autoregressive(None, b).generate(engine, p, 40, PhaseTimer("cpu")).output_ids
            out = method.generate(engine, p, 40, PhaseTimer("cpu"))
            assert out.output_ids == ref
            assert sum(out.accept_lengths) == len(out.output_ids) == 40
            accepted += sum(a - 1 for a in out.accept_lengths)
    assert sum(checked.values()) > 0
    assert accepted > 0


def test_tiny_sampling_runs_and_is_reproducible(tiny):
    from bench.core.engine import Engine
    from bench.core.timing import PhaseTimer

    bundle = make_bundle(tiny, random_heads(tiny))
    outs = []
    for _ in range(2):
        engine = Engine(tiny, [NO_EOS], max_context=512, temperature=0.8)
        engine.reseed(7)
        outs.append(build(bundle, "method=medusa").generate(engine, [1, 2, 3, 4], 30, PhaseTimer("cpu")))
    assert outs[0].output_ids == outs[1].output_ids
    assert sum(outs[0].accept_lengths) == len(outs[0].output_ids) == 30


@pytest.mark.model
@pytest.mark.parametrize("method", ["bpd"])
def test_real_model_untrained_heads_identical_to_greedy(smollm, prompts, greedy, method):
    """Zero-initialised blocks: every head is the lm_head, so drafts are rarely accepted, but output is AR's.
    (Medusa's tree on the real model: tests/test_batch.py at B = 4, and ProPD with neither switch, which is
    Medusa's verification, at B = 1 in tests/test_propd.py.)"""
    from tests.conftest import assert_lossless, run_method

    lm_head = smollm.model.get_output_embeddings()
    heads = MedusaHeads(lm_head.in_features, smollm.vocab_size, 5, lm_head=lm_head).to(smollm.device, smollm.dtype)
    bundle = dataclasses.replace(smollm)
    bundle.heads = heads.eval()
    bundle.load_heads = lambda: bundle.heads
    gens = run_method(bundle, prompts[:2], f"method={method}", max_new=32)
    assert_lossless(gens, [g[:32] for g in greedy[:2]])


@pytest.mark.parametrize("method", ["medusa", "bpd"])
def test_tiny_batch_rows_identical_to_greedy_ar(tiny, method, checked):
    """One forked proposer per batch row (Proposer.fork): each row sees only its own hidden states."""
    from bench.core.engine import Engine
    from bench.core.timing import PhaseTimer
    from methods.ar import Autoregressive

    g = torch.Generator().manual_seed(5)
    prompts = [torch.randint(0, V, (n,), generator=g).tolist() for n in (6, 11, 9)]
    bundle = make_bundle(tiny, random_heads(tiny))
    engine = Engine(tiny, [NO_EOS], max_context=512)
    refs = [Autoregressive(None, bundle).generate(engine, p, 30, PhaseTimer("cpu")).output_ids for p in prompts]
    gens = build(bundle, f"method={method}").generate_batch(engine, prompts, 30, PhaseTimer("cpu"),
                                                              [torch.Generator() for _ in prompts])
    assert [gen.output_ids for gen in gens] == refs
    assert len(checked) == len(prompts)  # three distinct row proposers, each checked on its own hidden states
