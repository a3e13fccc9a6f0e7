"""EAGLE-2 (and EAGLE-1, EAGLE-3) at temperature > 0 keeps the target distribution, end to end through the engine.

EAGLE-2 drafts deterministically (top-k by cumulative draft log-probability, at any temperature) and hands the
verifier no draft distribution: its candidates are fixed, so the verifier uses the point mass on each (accept x
with probability r[x], else zero r[x] and renormalise), which is EAGLE-2's own rule (q_x = 1). Handing the head's
softmax instead would be wrong: the candidates were not sampled from it.

EAGLE-3 drafts the same way over its head's draft vocabulary (here all tokens but two, mapped to target ids).

A tiny target with an 8-token vocabulary and an untrained head (losslessness does not depend on the head; with 8
tokens its top-3 still hold much of the target's mass, so drafts are often accepted and the residual path is
exercised too). Many rows decode the same prompt, each with its own generator, 3 new tokens: x1 is the prefill's
sample, x2 and x3 come from the first verification (an accepted draft or the bonus token, then the same one level
down). The joint histogram of (x2, x3) must match sum_x1 p(x1) p(x2 | x1) p(x3 | x1, x2) of the target at
temperature 0.8 by a chi-square test, and the same test must
reject a verifier that is wrong on purpose (no residual update after a rejection), so it has the power to fail.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from omegaconf import OmegaConf

import bench.core.engine as engine_module
from bench.core.engine import Engine
from bench.core.proposer import Acceptance
from bench.core.timing import PhaseTimer
from bench.models.eagle import EagleHead
from bench.models.eagle3 import Eagle3Head
from methods import build_method
from tests.conftest import compose_cfg, tiny_llama

V, NO_EOS, T = 8, 10_000, 0.8
PROMPT = [1, 5, 2, 7]
ROWS, BATCH = 1500, 250
# Chi-square 99.99% quantile for 63 degrees of freedom is about 113; a correct rule stays well below it. A wrong
# rule's statistic grows with the rows: the one below reaches ~210 at 1000 rows, ~350 at 2000.
LIMIT = 120.0


@pytest.fixture(scope="module")
def target():
    return tiny_llama(V)


def expected(target) -> torch.Tensor:
    """P(x2, x3) at temperature T, straight from the target (x1 summed out), [V, V] summing to 1."""
    with torch.no_grad():
        first = torch.softmax(target(torch.tensor([PROMPT])).logits[0, -1].float() / T, -1)
        ones = torch.tensor([[*PROMPT, x] for x in range(V)])
        second = torch.softmax(target(ones).logits[:, -1].float() / T, -1)  # [x1, x2]
        twos = torch.tensor([[*PROMPT, x, y] for x in range(V) for y in range(V)])
        third = torch.softmax(target(twos).logits[:, -1].float() / T, -1).view(V, V, V)  # [x1, x2, x3]
    return (first[:, None, None] * second[:, :, None] * third).sum(0)


def sample_pairs(target, name="eagle2", rows=ROWS, **settings) -> torch.Tensor:
    """Counts [V, V] of output tokens 2 and 3 over `rows` rows (row i seeded i); checks that drafts were
    accepted in a good share of the rows, so the test is not only about the bonus token."""
    torch.manual_seed(0)
    head = EagleHead(target).eval()
    # EAGLE-3's head drafts over a draft vocabulary without the last two tokens: q is 0 there, p is not
    head3 = Eagle3Head.from_target(target, tokens=torch.arange(V - 2), seed=0).eval()
    bundle = SimpleNamespace(model=target, device=torch.device("cpu"), dtype=torch.float32, vocab_size=V,
                             name="tiny", eos_token_ids=[NO_EOS], max_context=512, load_eagle=lambda: head,
                             load_eagle3=lambda: head3)
    cfg = OmegaConf.merge(compose_cfg(f"method={name}").method, settings)
    method = build_method(cfg, bundle)
    engine = Engine(target, [NO_EOS], 512, temperature=T)
    counts, drafted = torch.zeros(V, V), 0
    for start in range(0, rows, BATCH):
        gens = [torch.Generator().manual_seed(start + j) for j in range(BATCH)]
        for gen in method.generate_batch(engine, [PROMPT] * BATCH, 3, PhaseTimer(sync=False), gens):
            counts[gen.output_ids[1], gen.output_ids[2]] += 1
            drafted += gen.accept_lengths[1] > 1  # the first verification committed a draft token
    assert drafted > rows / 5
    return counts


def chi_square(counts: torch.Tensor, probs: torch.Tensor) -> float:
    want = probs * counts.sum()
    keep = want >= 5  # pool the sparse cells
    stat = ((counts[keep] - want[keep]) ** 2 / want[keep]).sum()
    rest_c, rest_e = counts[~keep].sum(), want[~keep].sum()
    if rest_e > 0:
        stat += (rest_c - rest_e) ** 2 / rest_e
    return float(stat)


def no_residual(tree, tokens, p, q, rule, generator=None, candidates=None):
    """Wrong on purpose: each candidate x is accepted with probability p[x], but a rejection leaves the target
    distribution as it was (no r[x] = 0), and the bonus token is drawn from p itself."""
    node, path, toks = 0, [0], tokens.tolist()
    while True:
        for child in tree.children[node]:
            if float(torch.rand((), generator=generator)) < float(p[node][toks[child]]):
                path.append(child)
                node = child
                break
        else:
            return path, int(torch.multinomial(p[node], 1, generator=generator))


SETTINGS = {"total_tokens": 8, "depth": 3, "topk": 3}


def test_eagle2_keeps_the_target_distribution(target):
    counts = sample_pairs(target, **SETTINGS)
    assert counts.sum() == ROWS  # the null statistic does not grow with ROWS; a wrong rule's does
    assert chi_square(counts, expected(target)) < LIMIT


def test_eagle3_keeps_the_target_distribution(target):
    assert chi_square(sample_pairs(target, "eagle3", **SETTINGS), expected(target)) < LIMIT


def test_eagle1_keeps_the_target_distribution(target):
    assert chi_square(sample_pairs(target, "eagle", topk=4), expected(target)) < LIMIT


# eagle3's wrong rule is in the slow suite: the verifier is the one eagle2's run goes through (20 s each here)
@pytest.mark.parametrize("name", ["eagle2", pytest.param("eagle3", marks=pytest.mark.slow)])
def test_a_wrong_rule_fails(target, monkeypatch, name):
    def verify(tree, tokens, p, q, rule, generator=None, candidates=None):
        return Acceptance.from_path(tree, *no_residual(tree, tokens, p, q, rule, generator, candidates))

    monkeypatch.setattr(engine_module, "stochastic_verify", verify)
    assert chi_square(sample_pairs(target, name, rows=2000, **SETTINGS), expected(target)) > 2 * LIMIT
