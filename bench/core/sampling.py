"""The one stochastic tree verifier (temperature > 0), shared by every method; each method picks a rule.

Verification walks the tree from the root. At a node, its children are tried in slot order (the order they
were drafted in) by recursive rejection sampling: child x is accepted when u * q[x] <= r[x] (u ~ U[0, 1)),
where r starts as the target distribution p at the node and q as the draft distribution the children were
sampled from. On a rejection the target residual becomes r <- norm(max(r - q, 0)) and, per rule:

- "specinfer": q is unchanged (children were sampled i.i.d. *with* replacement; SpecInfer's rule);
- "sequoia":   q[x] <- 0, q <- norm(q) (children sampled *without* replacement; Sequoia's and DySpec's
               Algorithm 3, which is the same rule). If q has no mass left the remaining siblings cannot
               have been drawn from it: stop, as DySpec's Algorithm 3 does (Sequoia's code would divide by 0).

A draft without distributions (PLD, Token Recycling, ...: deterministic candidates) is verified with q the
point mass on each child, under which both rules reduce to "accept x with probability r[x], else zero
r[x] and renormalize". After an accepted child the walk continues from it; when no child is accepted
(or the node has none), one token is sampled from the current residual r: the bonus/correction token.
Every rule keeps the output distributed exactly as the target's (tests/test_sampling_verify.py checks it).
"""

from __future__ import annotations

import torch

from bench.core.proposer import Acceptance
from bench.core.tree import Tree

RULES = ("specinfer", "sequoia")


def target_probs(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """softmax(logits / T) in float32 (fp16 probabilities lose the small residual masses)."""
    return torch.softmax(logits.float() / temperature, dim=-1)


def sample(probs: torch.Tensor, generator: torch.Generator | None) -> int:
    return int(torch.multinomial(probs, 1, generator=generator))


def stochastic_accept(tree: Tree, tokens: torch.Tensor, p: torch.Tensor, q: torch.Tensor | None, rule: str,
                      generator: torch.Generator | None = None,
                      candidates: torch.Tensor | None = None) -> tuple[list[int], int]:
    """stochastic_verify's outcome as Python values: (accepted path slots from the root, bonus token)."""
    acc = stochastic_verify(tree, tokens, p, q, rule, generator, candidates)
    return acc.slots().tolist(), int(acc.bonus[0])


def stochastic_verify(
    tree: Tree,
    tokens: torch.Tensor,
    p: torch.Tensor,
    q: torch.Tensor | None,
    rule: str,
    generator: torch.Generator | None = None,
    candidates: torch.Tensor | None = None,
) -> Acceptance:
    """tokens [N+1] tree inputs, p [N+1, V] target probabilities at each slot, q [N+1, V] draft probabilities
    at each slot (the distribution its children were drawn from) or None for deterministic drafts; candidates
    [N+1] bool or None (False: never accepted). Returns the batch-1 Acceptance, on p's device.

    Host waits: none for a chain (chain_verify) or for deterministic candidates (fixed_tree_verify); with draft
    distributions a node's children are decided on the device (their uniforms drawn in one call), and one read per
    visited node that has children says which child was taken; the bonus token is drawn on the device. A root
    without children (AR's step, a method that drafted nothing) draws it from p alone: chain_verify's closed form
    would launch ~30 ops to decide nothing."""
    if rule not in RULES:
        raise ValueError(f"unknown verification rule '{rule}' (known: {', '.join(RULES)})")
    if tree.is_chain and tree.size:
        return chain_verify(tree, tokens, p, q, generator, candidates)
    if q is None and tree.size:
        return fixed_tree_verify(tree, tokens, p, generator, candidates)
    on = tree.on(p.device)
    node = 0
    while True:
        kids = tree.children[node]
        if not kids:
            r = p[node]
            break
        taken, r = decide(on.children[node, : len(kids)], tokens, p[node], q[node], rule, generator, candidates)
        child = int(taken)  # the one read per level: -1 when every child was rejected
        if child < 0:
            break
        node = kids[child]
    bonus = torch.multinomial(r, 1, generator=generator)
    return Acceptance(on.slot_ids[node : node + 1], on.ancestors[node : node + 1], on.depth[node : node + 1] + 1,
                      bonus)


def chain_verify(tree: Tree, tokens: torch.Tensor, p: torch.Tensor, q: torch.Tensor | None,
                 generator: torch.Generator | None, candidates: torch.Tensor | None) -> Acceptance:
    """stochastic_verify for a chain (PLD, sd, ...: one child a node), with no host read: the walk's outcome in
    closed form. A node's one child is tried against the target's p at that node itself (no residual yet: a
    rejection ends the walk), so the tries are independent, drawn and decided together, and the accepted length
    is the run of leading acceptances; the bonus comes from node a's residual after its child's rejection, or from
    p where the child was not tried (not a candidate) or where a = N (the leaf). Both rules agree with one child."""
    n, dev = tree.size, p.device
    on = tree.on(dev)
    xs = tokens[1 : n + 1, None]
    u = torch.rand(n, generator=generator, device=dev)
    px = p[:n].gather(1, xs)[:, 0]
    take = u < px if q is None else u * q[:n].gather(1, xs)[:, 0] <= px
    tried = torch.ones(n, dtype=torch.bool, device=dev) if candidates is None else candidates[1 : n + 1]
    take = take & tried
    a = take.long().cumprod(0).sum().view(1)  # accepted drafts: the leading acceptances, on the device
    at = on.slot_ids.index_select(0, a)
    pa = p.index_select(0, at)[0]
    nxt = torch.clamp(at + 1, max=n)  # node a's child (a < n); clamped for the leaf, where it is not used
    x = tokens.index_select(0, nxt)
    rejected = (at < n) & torch.cat([tried, tried.new_zeros(1)]).index_select(0, at)
    if q is None:  # point mass on x: zero p[x] and renormalise
        rest = pa.scatter(0, x, torch.zeros(1, dtype=pa.dtype, device=dev))
    else:
        rest = torch.clamp(pa - q.index_select(0, at)[0], min=0.0)
    total = rest.sum()
    # total == 0: a rejection of probability 0 (r <= q everywhere means r == q), then p itself, as decide does
    r = torch.where(rejected & (total > 0), rest / torch.where(total > 0, total, 1.0), pa)
    bonus = torch.multinomial(r, 1, generator=generator)
    return Acceptance(at, on.ancestors.index_select(0, at), at + 1, bonus)


def decide(kids: torch.Tensor, tokens: torch.Tensor, p: torch.Tensor, q: torch.Tensor, rule: str,
           generator, candidates) -> tuple[torch.Tensor, torch.Tensor]:
    """Recursive rejection sampling over one node's children (kids [k] slots, in drafting order) drawn from the draft
    distribution q, on the device: (index of the accepted child, or -1; the target residual r the bonus token is
    drawn from when none is). Candidates without q: fixed_tree_verify."""
    dev = p.device
    xs = tokens[kids]
    u = torch.rand(len(kids), generator=generator, device=dev)  # one uniform per child, drawn together
    going = torch.ones((), dtype=torch.bool, device=dev)  # no child accepted and no stop yet
    taken = torch.full((), -1, dtype=torch.long, device=dev)
    r = p
    allowed = None if candidates is None else candidates[kids]  # (kids[j], a 0-dim index, would be read)
    for j in range(len(kids)):
        x = xs[j : j + 1]
        try_j = going if allowed is None else going & allowed[j]
        rx = r.gather(0, x)[0]
        take = try_j & (u[j] * q.gather(0, x)[0] <= rx)
        residual = torch.clamp(r - q, min=0.0)
        total = residual.sum()
        reject = try_j & ~take
        stop = reject & (total <= 0)  # r <= q everywhere means r == q: rejection had probability 0
        moved = reject & ~stop
        r = torch.where(moved, residual / total, r)
        going = going & ~take & ~stop
        if rule == "sequoia":  # q[x] <- 0, renormalised; no mass left: the other siblings cannot be drawn
            rest_q = q.scatter(0, x, torch.zeros(1, dtype=q.dtype, device=dev))
            q_total = rest_q.sum()
            q = torch.where(moved, rest_q / q_total, q)
            going = going & ~(moved & (q_total <= 0))
        taken = torch.where(take, j, taken)
    return taken, r


def first_taken(xs: torch.Tensor, tried: torch.Tensor, px: torch.Tensor,
                u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Deterministic candidates (q the point mass on each child: accept x with probability r[x], else zero r[x] and
    renormalise) decided in closed form, so the ops do not grow with the children (a loop launched ~12 a child: ~340
    a step for Token Recycling at T = 0.6). Per row of [R, K] children (tokens xs, tried or not, the target's p at
    them px, uniforms u): the index of the child the one-child-at-a-time loop takes (K for none) and which children
    are a first try of their token. Child j, tried once every earlier one is rejected, has r[x_j] = p[x_j] / (1 - the
    mass of the distinct tokens tried before it), or 0 if its token was tried already; the first accepted is taken.
    The same uniforms give the loop's decisions (tests/test_sampling_verify.py)."""
    k = xs.shape[1]
    order = torch.arange(k, device=xs.device)
    again = ((xs[:, :, None] == xs[:, None, :]) & tried[:, None, :] & (order[None, :] < order[:, None])).any(2)
    first = tried & ~again  # tried, and its token not tried before
    mass = torch.where(first, px, 0.0)
    left = 1 - (torch.cumsum(mass, 1) - mass)  # the residual's mass before child j is tried
    take = first & (left > 0) & (u * left < px)
    return torch.where(take, order, k).min(1).values, first


def tried_residual(p: torch.Tensor, xs: torch.Tensor, first: torch.Tensor) -> torch.Tensor:
    """p [V] with the tokens xs [K] where `first` zeroed, renormalised; p itself where nothing is left."""
    rest = torch.where(torch.zeros_like(p).scatter_add(0, xs, first.to(p.dtype)) > 0, 0.0, p)
    total = rest.sum()
    return torch.where(total > 0, rest / torch.where(total > 0, total, 1.0), p)


def fixed_tree_verify(tree: Tree, tokens: torch.Tensor, p: torch.Tensor, generator,
                      candidates: torch.Tensor | None) -> Acceptance:
    """stochastic_verify for deterministic candidates on a tree (q None: Token Recycling, Medusa, Lookahead, REST,
    ...), with no host read. Every node's children are decided at once, as if the walk had reached it (first_taken,
    a row a node); the walk then follows each node's taken child, one gather a level for the tree's depth, and stops
    at the node where none is taken (a leaf: none to take); the bonus is drawn from that node's residual. The
    uniforms of every node are drawn together, so the draws differ from a walk's that draws them as it goes, not
    their distribution; the walk read the host once a level visited (Token Recycling at T = 0.6 waited 2.788 a decode
    step at gpu-check's sizes, evidence/rehearsal/vm_AMD_EPYC-20261202-0904/)."""
    dev = p.device
    on = tree.on(dev)
    kids = on.children  # [N+1, K], 0 where a node has fewer children (slot 0, the root, is no one's child)
    n1, k = kids.shape
    flat = kids.flatten()
    xs = tokens.index_select(0, flat).view(n1, k)
    tried = kids > 0
    if candidates is not None:
        tried = tried & candidates.index_select(0, flat).view(n1, k)
    u = torch.rand(n1, k, generator=generator, device=dev)
    at, first = first_taken(xs, tried, p.gather(1, xs), u)
    step = torch.where(at < k, kids.gather(1, at.clamp(max=k - 1)[:, None])[:, 0], on.slot_ids)  # none: stay
    node = on.slot_ids[:1]
    for _ in range(on.path_slots.shape[1] - 1):  # the tree's depth, from a shape (Tree.max_depth reads)
        node = step.index_select(0, node)
    r = tried_residual(p.index_select(0, node)[0], xs.index_select(0, node)[0], first.index_select(0, node)[0])
    bonus = torch.multinomial(r, 1, generator=generator)
    return Acceptance(node, on.ancestors.index_select(0, node), on.depth.index_select(0, node) + 1, bonus)
