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

from bench.core.tree import Tree

RULES = ("specinfer", "sequoia")


def target_probs(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """softmax(logits / T) in float32 (fp16 probabilities lose the small residual masses)."""
    return torch.softmax(logits.float() / temperature, dim=-1)


def sample(probs: torch.Tensor, generator: torch.Generator | None) -> int:
    return int(torch.multinomial(probs, 1, generator=generator))


def _normalized(x: torch.Tensor) -> torch.Tensor | None:
    total = x.sum()
    return None if float(total) <= 0 else x / total


def stochastic_accept(
    tree: Tree,
    tokens: torch.Tensor,
    p: torch.Tensor,
    q: torch.Tensor | None,
    rule: str,
    generator: torch.Generator | None = None,
    candidates: torch.Tensor | None = None,
) -> tuple[list[int], int]:
    """tokens [N+1] tree inputs, p [N+1, V] target probabilities at each slot, q [N+1, V] draft probabilities
    at each slot (the distribution its children were drawn from) or None for deterministic drafts.
    Returns (accepted path slots from the root, bonus token)."""
    if rule not in RULES:
        raise ValueError(f"unknown verification rule '{rule}' (known: {', '.join(RULES)})")
    toks = tokens.tolist()
    ok = None if candidates is None else candidates.tolist()
    node, path = 0, [0]
    while True:
        r = p[node]
        kids = [c for c in tree.children[node] if ok is None or ok[c]]
        qn = None if q is None or not kids else q[node]
        accepted = None
        for child in kids:
            x = toks[child]
            u = float(torch.rand((), generator=generator, device=p.device))
            if qn is None:  # point mass on x
                if u < float(r[x]):
                    accepted = child
                    break
                r = r.clone()
                r[x] = 0.0
                r = _normalized(r)
                if r is None:  # cannot happen with exact arithmetic: r[x] < 1 whenever x was rejected
                    r = p[node]
                    break
                continue
            if u * float(qn[x]) <= float(r[x]):
                accepted = child
                break
            residual = _normalized(torch.clamp(r - qn, min=0.0))
            if residual is None:  # r <= q everywhere means r == q: rejection had probability 0
                break
            r = residual
            if rule == "sequoia":
                qn = qn.clone()
                qn[x] = 0.0
                qn = _normalized(qn)
                if qn is None:
                    break
        if accepted is None:
            return path, sample(r, generator)
        node = accepted
        path.append(node)
