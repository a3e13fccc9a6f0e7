"""ProPD (methods/propd) and the core's layer-wise forward: a pruned forward is exact for the survivors (logits and
KV equal an unpruned forward over the surviving subtree), the top-k criterion drops whole subtrees, and propd in
every switch combination is token-identical to greedy AR: tiny random Llama at B = 1 and 4, the real embedded model
at B = 1 and 4. The dynamic tree controller: tests/test_propd_dynamic.py; the early heads: tests/test_early_heads.py."""

from __future__ import annotations

import dataclasses
import itertools
from types import SimpleNamespace

import pytest
import torch
from transformers import DynamicCache

from bench.core.engine import Engine
from bench.core.forward import LayerwiseForward, cache_kw, full_forward, kept_order
from bench.core.kv import keep_accepted
from bench.core.timing import PhaseTimer
from bench.core.tree import tree_from_parents
from bench.errors import HarnessError
from bench.metrics import first_divergence, tree_nodes
from bench.models.heads import MedusaHeads, init_heads
from methods import build_method
from methods.propd.prune import TopKPrune
from tests.conftest import compose_cfg, tiny_llama

V = 64
NO_EOS = 10_000
# A 9-node tree: root -> 1, 2; 1 -> 3, 4; 2 -> 5; 3 -> 6, 7; 5 -> 8; 6 -> 9
PARENTS = [-1, 0, 0, 1, 1, 2, 3, 3, 5, 6]


def subtree_of(parents, slot):
    out = {slot}
    for i, p in enumerate(parents):
        if p in out:
            out.add(i)
    return out


class DropSlots:
    """A slot filter that drops given slots (with their subtrees) per row, whatever the hidden states."""

    def __init__(self, drops):
        self.drops = drops

    def __call__(self, hidden, input_ids, trees):
        keep = torch.zeros(input_ids.shape, dtype=torch.bool)
        for b, tree in enumerate(trees):
            keep[b, : tree.size + 1] = True
            parents = tree.parents.tolist()
            for slot in self.drops[b]:
                for s in subtree_of(parents, slot):
                    keep[b, s] = False
        return keep


def prefill(model, prefix):
    cache = DynamicCache(config=model.config)
    model(input_ids=torch.tensor([prefix]), **cache_kw(model, cache), use_cache=True)
    return cache


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("drops", [[2], [3, 5], [1, 2], []], ids=["branch", "two", "all", "none"])
@torch.inference_mode()
def test_pruned_forward_is_exact_for_the_survivors(attn, drops):
    model = tiny_llama(V, attn)
    tree = tree_from_parents(PARENTS)
    g = torch.Generator().manual_seed(0)
    prefix = torch.randint(0, V, (11,), generator=g).tolist()
    tokens = torch.randint(0, V, (tree.size + 1,), generator=g)
    positions = (len(prefix) - 1 + tree.depth)[None]
    mask = torch.cat([torch.zeros(tree.size + 1, len(prefix)), tree.attention_bias(torch.float32, "cpu")], 1)[None, None]
    cache = prefill(model, prefix)
    out = LayerwiseForward(1, DropSlots([drops]))(model, tokens[None], cache=cache, position_ids=positions,
                                                  attention_mask=mask, trees=[tree], output_hidden=True)
    survivors = [s for s in range(tree.size + 1) if bool(out.kept[0, s])]
    gone = set().union(*[subtree_of(PARENTS, d) for d in drops]) if drops else set()
    assert set(survivors) == set(range(tree.size + 1)) - gone
    # the surviving subtree, verified by the plain forward
    index = {s: i for i, s in enumerate(survivors)}
    sub = tree_from_parents([-1] + [index[PARENTS[s]] for s in survivors[1:]])
    sub_mask = torch.cat([torch.zeros(sub.size + 1, len(prefix)), sub.attention_bias(torch.float32, "cpu")], 1)
    ref_cache = prefill(model, prefix)
    ref = full_forward(model, tokens[survivors][None], cache=ref_cache, position_ids=positions[:, survivors],
                       attention_mask=sub_mask[None, None], output_hidden=True)
    assert torch.allclose(out.logits[0, survivors], ref.logits[0], atol=1e-5)
    assert torch.allclose(out.hidden[0, survivors], ref.hidden[0], atol=1e-5)
    # KV: keep the deepest surviving path; every layer then equals the reference's compacted cache
    leaf = max(survivors, key=lambda s: (int(tree.depth[s]), -s))
    path = sorted(s for s in survivors if bool(tree.ancestors[leaf, s]))
    start = len(prefix)
    keep_accepted(cache, [start], [torch.tensor(path)], start, out.kv_columns)
    keep_accepted(ref_cache, [start], [torch.tensor([index[s] for s in path])], start)
    for a, b in zip(cache.layers, ref_cache.layers):
        assert a.keys.shape == b.keys.shape
        assert torch.allclose(a.keys, b.keys, atol=1e-5) and torch.allclose(a.values, b.values, atol=1e-5)


def test_kept_order_pads_rows_with_their_dropped_slots():
    keep = torch.tensor([[1, 0, 1, 1, 0], [1, 1, 0, 0, 0]], dtype=torch.bool)
    select, columns = kept_order(keep)
    assert select.tolist() == [[0, 2, 3], [0, 1, 2]]
    for b in range(2):
        assert [int(columns[b, s]) for s in select[b]] == [0, 1, 2]


class FixedHead:
    """Early 'head' whose logits at a slot are given directly (by the slot's input token)."""

    def __init__(self, table):
        self.table = table

    def __call__(self, x):
        return self.table[x[..., 0].round().long()]


def test_topk_prune_drops_nodes_outside_the_parents_topk_with_their_subtrees():
    tree = tree_from_parents(PARENTS)
    tokens = torch.tensor([[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]])
    table = torch.zeros(10, 10)
    # the parent of token t (slot t) ranks its children: slot 1 (token 1) ranks 3 first, 4 last, ...
    table[0, 1], table[0, 2] = 5.0, 4.0   # root: 1 and 2 in top-2
    table[1, 3], table[1, 4] = 5.0, -5.0  # 4 not in top-2 of slot 1
    table[2, 5] = -5.0                    # 5 not in top-2 of slot 2 -> 8 goes too
    table[3, 6], table[3, 7] = 5.0, 4.0
    table[6, 9] = 5.0
    hidden = tokens[..., None].float().expand(1, 10, 4)
    prune = TopKPrune(lambda x: x, FixedHead(table), topk=2)
    keep = prune(hidden, tokens, [tree])
    assert keep[0].tolist() == [True, True, True, True, False, False, True, True, False, True]


# ---- end to end ------------------------------------------------------------------------------------------

COMBOS = {
    "both": ("method=propd",),
    "prune": ("method=propd", "method.dynamic=false"),
    "dynamic": ("method=propd", "method.prune=false"),
    "neither": ("method=propd", "method.prune=false", "method.dynamic=false"),
}


def random_heads(model, n, seed):
    torch.manual_seed(seed)
    heads = MedusaHeads(model.config.hidden_size, model.config.vocab_size, n, lm_head=model.get_output_embeddings())
    for block in heads.blocks:
        torch.nn.init.normal_(block[0].linear.weight, std=0.5)
    return heads.eval()


def tiny_bundle(model):
    heads = random_heads(model, 5, 1)
    early = random_heads(model, 1, 2)
    early.layers = [1]
    return SimpleNamespace(name="tiny", device=torch.device("cpu"), dtype=torch.float32, vocab_size=V, model=model,
                           eos_token_ids=[NO_EOS], max_context=512, heads=heads, load_heads=lambda: heads,
                           load_early_heads=lambda: early)


def decode(method, engine, prompts, batch_size, max_new):
    out = []
    for i in range(0, len(prompts), batch_size):
        chunk = prompts[i : i + batch_size]
        gens = [torch.Generator().manual_seed(i + j) for j in range(len(chunk))]
        out += method.generate_batch(engine, chunk, max_new, PhaseTimer("cpu"), gens)
    return out


@pytest.mark.parametrize("batch_size", [1, 4])
@pytest.mark.parametrize("combo", sorted(COMBOS))
def test_tiny_propd_identical_to_greedy_ar(combo, batch_size):
    model = tiny_llama(V)
    bundle = tiny_bundle(model)
    g = torch.Generator().manual_seed(3)
    prompts = [torch.randint(0, V, (n,), generator=g).tolist() for n in (5, 12, 9, 3)] + [[4, 5, 6] * 4]
    engine = Engine(model, [NO_EOS], max_context=512)
    ar = build_method(compose_cfg("method=ar").method, bundle)
    refs = [ar.generate(engine, p, 40, PhaseTimer("cpu")).output_ids for p in prompts]
    method = build_method(compose_cfg(*COMBOS[combo], "method.prune_layer=1", "method.prune_topk=8").method,
                          bundle)
    gens = decode(method, engine, prompts, batch_size, 40)
    for i, (gen, ref) in enumerate(zip(gens, refs, strict=True)):
        assert gen.output_ids == ref, f"{combo}: prompt {i} diverges at {first_divergence(gen.output_ids, ref)}"
    nodes = tree_nodes([{"draft_nodes": g.draft_nodes, "verified_nodes": g.verified_nodes} for g in gens])
    if "prune" in combo or combo == "both":
        assert nodes["prune_rate"] > 0  # top-8 of 64 tokens: most random nodes go
    else:
        assert nodes["prune_rate"] == 0
    if combo in ("both", "dynamic"):
        sizes = {n for g in gens for n in g.draft_nodes}
        assert len(sizes) > 1 and method.controller.selections >= 1
        hits = method.describe()["hit_rates"]  # ProPD Figure 6 (a): per head, top-1..K, never falling with K
        assert len(hits) == 5 and all(0 <= a <= b <= 1 for row in hits for a, b in itertools.pairwise(row))
        assert any(row[-1] > 0 for row in hits)


@pytest.mark.parametrize("shift", [0, 1])
def test_hit_rates_score_each_head_at_the_position_it_predicts(shift, monkeypatch):
    """Oracle heads: head i's top-1 is the greedy token at position length + i + shift (the tree's depth-1 nodes
    follow the last committed token). Aligned (shift 0), every head is right at every check, so its top-1 hit rate
    climbs to ~1 and the drafts are accepted; one position off, the rates stay low, so a misaligned check fails."""
    model = tiny_llama(V)
    bundle = tiny_bundle(model)
    engine = Engine(model, [NO_EOS], max_context=512)
    prompt = torch.randint(0, V, (9,), generator=torch.Generator().manual_seed(2)).tolist()  # no token repeats at the end
    ar = build_method(compose_cfg("method=ar").method, bundle)
    full = prompt + ar.generate(engine, prompt, 60, PhaseTimer("cpu")).output_ids
    method = build_method(compose_cfg(*COMBOS["dynamic"], "method.hit_alpha=0.5").method, bundle)
    propose_batch, seen = type(method).propose_batch, {}

    def remember_lengths(self, proposers, seqs, lengths):
        seen["lengths"] = lengths
        return propose_batch(self, proposers, seqs, lengths)

    def oracle_topk(self, proposers, k, heads):  # [B, heads, k]
        tops = [[full[min(n + i + shift, len(full) - 1)] for i in range(heads)] for n in seen["lengths"]]
        return torch.tensor([[[t] + [(t + j) % V for j in range(1, k)] for t in top] for top in tops])

    monkeypatch.setattr(type(method), "propose_batch", remember_lengths)
    monkeypatch.setattr(type(method), "rows_topk", oracle_topk)
    gen = decode(method, engine, [prompt], 1, 60)[0]
    assert gen.output_ids == full[len(prompt):]
    top1 = [row[0] for row in method.describe()["hit_rates"]]
    if shift == 0:
        assert min(top1) > 0.95, top1
        assert len(gen.output_ids) / len(gen.draft_nodes) > 2.5  # the oracle's drafts are accepted
    else:
        assert max(top1) < 0.5, top1


def test_propd_config_errors():
    model = tiny_llama(V)
    bundle = tiny_bundle(model)
    with pytest.raises(Exception, match="early heads cover layers"):
        build_method(compose_cfg("method=propd", "method.prune_layer=3").method, bundle)


# ---- the real embedded model ----------------------------------------------------------------------------

REAL_NEW = 16  # "neither" verifies the whole 64-node Medusa tree per row and step


@pytest.fixture(scope="module")
def real(smollm, prompts, greedy):
    """4 HumanEval prompts of different lengths (the session's first four) and their greedy outputs (the session's
    HF greedy reference, tests/conftest.py, cut to REAL_NEW tokens); the trained Medusa and early heads when
    `make heads` was run here, else untrained ones (zero blocks: same code paths, output must match)."""
    prompts, refs = prompts[:4], [g[:REAL_NEW] for g in greedy[:4]]
    assert len({len(p) for p in prompts}) == 4  # rows of different lengths at B = 4
    lm_head = smollm.model.get_output_embeddings()
    try:
        heads = smollm.load_heads()
    except HarnessError:
        heads = init_heads(lm_head, 5)
    try:
        early = smollm.load_early_heads()
    except HarnessError:
        early = init_heads(lm_head, 4)
        early.layers = [1, 2, 3, 4]
    bundle = dataclasses.replace(smollm)
    bundle.load_heads, bundle.load_early_heads = (lambda: heads), (lambda: early)
    return bundle, prompts, refs


# Every switch combination at B = 1 and 4, but "neither" at B = 1 only: at B = 4 it verifies Medusa's whole tree per
# row (20 s of the suite), the batched path the other three combinations and tests/test_batch.py's medusa case run.
# Both switches at B = 1 in `make test`; B = 4 and the ablations in `make test-slow` (all of them on the tiny model
# above; batched real-model rows: tests/test_batch.py).
REAL_CASES = [(c, b) if (c, b) == ("both", 1) else pytest.param(c, b, marks=pytest.mark.slow)
              for c in sorted(COMBOS) for b in (1, 4) if (c, b) != ("neither", 4)]


@pytest.mark.model
@pytest.mark.parametrize(("combo", "batch_size"), REAL_CASES)
def test_real_model_propd_identical_to_greedy_ar(real, combo, batch_size):
    bundle, prompts, refs = real
    method = build_method(compose_cfg(*COMBOS[combo]).method, bundle)
    engine = Engine(bundle.model, bundle.eos_token_ids, bundle.max_context)
    gens = decode(method, engine, prompts, batch_size, REAL_NEW)
    for i, (gen, ref) in enumerate(zip(gens, refs, strict=True)):
        assert gen.output_ids == ref, f"{combo}@{batch_size}: prompt {i} diverges at {first_divergence(gen.output_ids, ref)}"


def test_a_pruned_batch_is_verified_together():
    """Pruning drops different slots in each row, but the rows share one tree: they are verified as one group (each
    row's dropped slots its own non-candidates), so the verify phase launches the same ops a step at batch 4 as at
    2, where verifying each row alone took 41.4 and 82.8 ops a step."""
    from bench.core.launches import OpCounter, OpTimer

    model = tiny_llama(V)
    bundle = tiny_bundle(model)
    engine = Engine(model, [NO_EOS], max_context=512)
    method = build_method(compose_cfg(*COMBOS["prune"], "method.prune_layer=1", "method.prune_topk=8").method, bundle)
    g = torch.Generator().manual_seed(6)
    base = [torch.randint(0, V, (n,), generator=g).tolist() for n in (5, 12)]

    def verify_ops(rows: int) -> float:  # a decode step's verify ops: 12 new tokens less 6
        spent = []
        for new in (6, 12):
            with OpCounter() as counter:
                gens = engine.generate_batch([method.fork() for _ in range(rows)], base * (rows // 2), new,
                                             OpTimer(counter), [torch.Generator() for _ in range(rows)])
            steps = max(len(x.accept_lengths) for x in gens) - 1
            spent.append((gens[0].phase_times["verify"], steps))
        return (spent[1][0] - spent[0][0]) / max(spent[1][1] - spent[0][1], 1)

    verify_ops(2)  # the first run's own ops, once
    two, four = verify_ops(2), verify_ops(4)
    assert two > 0 and four <= two + 1, (two, four)
