"""REST drafts replayed along greedy AR outputs: the MAT of our retriever and, if the PyPI `draftretriever` wheel
is installed, of that wheel used the way Spec-Bench uses it (docs/methods.md, "REST datastores").

    python scripts/rest_replay.py [model=smollm2-135m] [dataset=mbpp_tr] [run.limit=8] [run.max_new_tokens=128]
                                  [method.store=chat_offline]   (default: the dataset's store, code_offline)
    (`pip install draftretriever` into the venv adds the wheel's rows)

A lossless method commits, per target forward, the longest draft path that matches the greedy continuation plus
one token. So a retriever replayed along the same greedy trajectory gets the MAT that an end-to-end run gets,
without any timing. The wheel indexes our store's documents: both retrievers see the same text.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Callable

import numpy as np
import torch
from tqdm import tqdm

from bench.core.timing import PhaseTimer
from bench.errors import HarnessError
from bench.run.compose import compose_config
from bench.run.runner import Runner
from methods.rest.proposer import Rest

Drafter = Callable[[list[int]], set[tuple[int, ...]]]  # context (root last) -> the draft's root-to-node paths


def accepted(paths: set[tuple[int, ...]], target: list[int]) -> int:
    a = 0
    while a < len(target) and tuple(target[: a + 1]) in paths:
        a += 1
    return a


def replay(drafter: Drafter, prompt: list[int], output: list[int]) -> tuple[int, int]:
    """(steps, tokens) of one prompt-turn: the prefill commits the first token, then one step per draft."""
    full, p, steps, tokens = prompt + output, len(prompt), 1, 1
    while p < len(full) - 1:
        target = full[p + 1 :]
        a = min(accepted(drafter(full[: p + 1]), target), len(target) - 1)  # the last token is a bonus
        steps, tokens, p = steps + 1, tokens + a + 1, p + a + 1
    return steps, tokens


def ours(rest: Rest) -> Drafter:
    def draft(ctx):
        d = rest.propose(torch.tensor(ctx), len(ctx))
        parents, toks, paths = d.tree.parents.tolist(), d.tokens.tolist(), {0: ()}
        for slot in range(1, len(parents)):  # parents precede children in slot order
            paths[slot] = (*paths[parents[slot]], toks[slot - 1])
        return set(paths.values()) - {()}
    return draft


def wheel_paths(reader, ctx: list[int], spans) -> set[tuple[int, ...]]:
    for s in spans:  # Spec-Bench: spans 16..2, the first with any result wins
        rows = reader.search(ctx[-s:], choices=64)[0]
        if len(rows):
            return {tuple(r[:j]) for r in ([x for x in row if x != -2] for row in rows) for j in range(1, len(r) + 1)}
    return set()


def wheel_drafters(rest: Rest, folder: str) -> dict[str, Callable[[], Drafter]]:
    """The PyPI wheel (0.1.1) over our store's documents: {label: a factory of a drafter for one prompt}."""
    import draftretriever

    store, index = rest.store, f"{folder}/store.idx"
    writer = draftretriever.Writer(file_path=index, vocab_size=rest.bundle.vocab_size)
    ends = np.flatnonzero(store.tokens == store.sep)
    for a, b in zip(np.concatenate([[0], ends[:-1] + 1]), ends, strict=True):
        if b > a:
            writer.add_entry(store.tokens[a:b].tolist())
    writer.finalize()
    del writer
    shared = draftretriever.Reader(index_file_path=index)  # Spec-Bench: one Reader for warm-up and every question
    static = draftretriever.Reader(index_file_path=index)
    spans = range(16, 1, -1)

    def drafter(reader, spans) -> Drafter:
        return lambda ctx: wheel_paths(reader, ctx, spans)

    return {
        "PyPI draftretriever, 2-token queries (its learning adds nothing)": lambda: drafter(static, [2]),
        "PyPI draftretriever, a new Reader per prompt": lambda: drafter(
            draftretriever.Reader(index_file_path=index), spans),
        "PyPI draftretriever, one Reader for all prompts (Spec-Bench)": lambda: drafter(shared, spans),
    }


def main(argv: list[str]) -> None:
    if "-h" in argv or "--help" in argv:
        print(__doc__.split("\n\n")[1])
        return
    overrides = ["dataset=mbpp_tr", "run.limit=8", "run.max_new_tokens=128"]
    overrides += [a for a in argv if not a.startswith("method.")]
    runner = Runner(compose_config([*overrides, "method=ar"]))
    rest_cfg = compose_config([*overrides, "method=rest", *(a for a in argv if a.startswith("method."))]).method
    rest = Rest(rest_cfg, runner.bundle)
    quiet = PhaseTimer(runner.bundle.device, sync=False)
    pairs = []
    for item in tqdm(runner.items, desc="greedy AR", unit="q", file=sys.stderr):
        ids = runner.encode([], item["turns"][0])
        pairs.append((ids, runner.engine.generate(runner.method, ids, runner.cfg.run.max_new_tokens, quiet).output_ids))
    with tempfile.TemporaryDirectory() as folder:
        drafters: dict[str, Callable[[], Drafter]] = {f"ours (rest, {rest.store_name})": lambda: ours(rest)}
        try:
            drafters |= wheel_drafters(rest, folder)
        except ImportError:
            print("draftretriever is not installed: only our retriever is replayed", file=sys.stderr)
        for label, make in drafters.items():
            steps = tokens = 0
            for ids, out in pairs:
                s, t = replay(make(), ids, out)
                steps, tokens = steps + s, tokens + t
            print(f"{label}: MAT {tokens / steps:.3f} ({tokens} tokens / {steps} steps, {len(pairs)} prompts)")


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except HarnessError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(1)
