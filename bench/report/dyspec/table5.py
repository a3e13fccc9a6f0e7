"""DySpec Table 5 and Figures 9 and 7 (Appendix C): non-zero 32x32 tiles of the tree attention mask in four token
orders (creation, BFS, DySpec's DFS reorder, heavy-path) over seeded random trees (or recorded ones, `--trees`),
against the prefix length (every prefix key visible to every tree node), and one tree's mask; no runs. Kernel times
(Table 5's other columns) are not measured: they need a block-sparse GPU kernel."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd

from bench.core import tree_order
from bench.core.tree_order import BLOCK, GENERATORS, ORDERS, block_count, permute, tree_mask
from bench.errors import HarnessError
from bench.report.declare import Artifact, Cover, Recipe, Shown, option
from bench.report.output import Report
from bench.report.plots import new_figure
from bench.report.select import RunSet
from bench.report.tables import fmt

PAPER_CSV = "dyspec_table5_tree_attention.csv"
FIG9_CSV = "dyspec_fig9_block_counts.csv"
GENERATOR_NOTES = {
    "recursive": "uniform random recursive tree: node i's parent is uniform over nodes 0..i-1; original "
                 "order = creation order",
    "greedy": "DySpec-shaped: greedy expansion by path value, each node's ranked children get stick-breaking "
              "Beta(1, 1) shares of its draft probability; original order = expansion order",
}
BUCKET = 128  # real DySpec trees vary in size: grouped in buckets of this many nodes


class TreeFileError(HarnessError, ValueError):
    """A --trees file that is missing, empty, or has a malformed line."""


def order_counts(parents, prefixes: list[int], block: int = BLOCK) -> dict[tuple[str, int], int]:
    """Tiles of the tree's mask in every order of ORDERS and at every prefix length."""
    masks = {name: tree_mask(permute(parents, order_of(parents))) for name, order_of in ORDERS.items()}
    return {(name, prefix): tree_order.prefix_block_count(mask, prefix, block) for name, mask in masks.items()
            for prefix in prefixes}


def synthetic_counts(generator: str, size: int, n_trees: int, seed: int, prefixes: list[int],
                     block: int = BLOCK) -> list[dict]:
    """Long rows (source, tree, tree_size, prefix_len, order, blocks) for n_trees random trees, seeded by (seed,
    generator, size) alone."""
    rng = np.random.default_rng([seed, list(GENERATORS).index(generator), size])
    rows = []
    for t in range(n_trees):
        parents = GENERATORS[generator](size, rng)
        for (order, prefix), blocks in order_counts(parents, prefixes, block).items():
            rows.append({"source": generator, "tree": t, "tree_size": size, "prefix_len": prefix,
                         "order": order, "blocks": blocks})
    return rows


def load_tree_file(path: Path) -> list[tuple[np.ndarray, int]]:
    """(parents, prefix_len) per JSONL line; a malformed line is one TreeFileError naming it."""
    if not path.is_file():
        raise TreeFileError(f"tree file not found: {path}")
    trees = []
    for lineno, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
            parents, prefix = rec["parents"], rec["prefix_len"]
            if not isinstance(prefix, int) or isinstance(prefix, bool) or prefix < 0:
                raise ValueError(f"prefix_len must be an integer >= 0, got {prefix!r}")
            if not isinstance(parents, list) or not all(isinstance(x, int) for x in parents):
                raise ValueError("parents must be a list of integers")
            trees.append((tree_order.as_parents(parents), prefix))
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
            what = f"missing key {e}" if isinstance(e, KeyError) else str(e)
            raise TreeFileError(f"malformed line {lineno} in {path}: {what}") from None
    if not trees:
        raise TreeFileError(f"no trees in {path}")
    return trees


def file_counts(trees: list[tuple[np.ndarray, int]], prefixes: list[int], block: int = BLOCK) -> list[dict]:
    """Long rows for recorded trees: the prefix sweep, plus each tree at its own recorded prefix."""
    rows = []
    prefixes = sorted({0, *prefixes})  # prefix 0 is the tree-only mask of Table 5
    for t, (parents, own) in enumerate(trees):
        hi = max(1, math.ceil(len(parents) / BUCKET)) * BUCKET  # its size bucket: hi - BUCKET + 1 .. hi
        for (order, prefix), blocks in order_counts(parents, sorted(set(prefixes) | {own}), block).items():
            base = {"source": "file", "tree": t, "tree_size": len(parents),
                    "bucket": f"{hi - BUCKET + 1}-{hi}", "bucket_hi": hi, "order": order, "blocks": blocks}
            if prefix in prefixes:
                rows.append({**base, "prefix_len": prefix, "recorded": False})
            if prefix == own:
                rows.append({**base, "prefix_len": prefix, "recorded": True})
    return rows


# ---------------------------------------------------------------- tables

def paper_table5(paper: pd.DataFrame) -> pd.DataFrame:
    """tree_size -> paper's block counts without / with reorder (of the paper's Table 5 CSV)."""
    wide = paper.pivot(index="tree_size", columns="reorder", values="block_count")
    return pd.DataFrame({"paper_blocks_original": wide[False], "paper_blocks_dfs": wide[True]})


def per_order(long: pd.DataFrame, key: list[str], aggfunc: str = "mean") -> pd.DataFrame:
    """Tiles aggregated per `key` (rows) and order (columns)."""
    return long.pivot_table(index=key, columns="order", values="blocks", aggfunc=aggfunc)


def table5(long: pd.DataFrame, block: int, paper: pd.DataFrame) -> pd.DataFrame:
    """One row per (generator, tree size): mean tiles per order at prefix 0, reduction, the paper's."""
    key = ["source", "tree_size"]
    at0 = long[long.prefix_len == 0]
    mean = per_order(at0, key, "mean")
    # one tree per size: every std is NaN, which pivot_table drops; keep the cells, empty
    std = per_order(at0, key, "std").reindex(index=mean.index, columns=mean.columns)
    df = pd.DataFrame({"trees": at0[at0.order == "original"].groupby(key).tree.nunique(),
                       **{f"blocks_{order}": mean[order] for order in ORDERS},
                       "blocks_original_std": std["original"], "blocks_dfs_std": std["dfs"],
                       "reduction_dfs": mean["original"] / mean["dfs"],
                       "reduction_heavy": mean["original"] / mean["heavy"]}).reset_index()
    nb = -(-df.tree_size // block)
    df["lower_triangle"] = nb * (nb + 1) // 2  # every tile on or below the diagonal: the most possible
    df["block"] = block
    df = df.join(paper_table5(paper), on="tree_size")
    rank = {g: i for i, g in enumerate(dict.fromkeys(long.source))}  # keep the command line's order
    df = df.sort_values(["source", "tree_size"], key=lambda c: c.map(rank) if c.name == "source" else c)
    df["paper_reduction"] = df.paper_blocks_original / df.paper_blocks_dfs
    return df


def trees_table(long: pd.DataFrame) -> pd.DataFrame:
    """Recorded trees per size bucket: tiles at prefix 0 per order, and at each tree's recorded prefix."""
    key = ["bucket_hi", "bucket"]
    own = long[long.recorded]
    per_tree = own[own.order == "original"].groupby(key)
    m0, mo = per_order(long[(long.prefix_len == 0) & ~long.recorded], key), per_order(own, key)
    df = pd.DataFrame({"trees": per_tree.tree.nunique(), "size_mean": per_tree.tree_size.mean(),
                       "prefix_len_mean": per_tree.prefix_len.mean(),
                       **{f"blocks_{order}": m0[order] for order in ORDERS},
                       "reduction_dfs": m0["original"] / m0["dfs"],
                       "blocks_original_at_recorded_prefix": mo["original"],
                       "blocks_dfs_at_recorded_prefix": mo["dfs"],
                       "reduction_dfs_at_recorded_prefix": mo["original"] / mo["dfs"]})
    return df.reset_index().drop(columns="bucket_hi").rename(columns={"bucket": "size_bucket"})


def beside(ours, paper, spec: str = ".1f") -> str:
    """"ours (paper)", or ours alone where the paper has no value."""
    return fmt(ours, spec) if paper is None or math.isnan(paper) else f"{fmt(ours, spec)} ({fmt(paper, spec)})"


def closeness(df: pd.DataFrame) -> dict[str, tuple[float, float]]:
    """Per generator: mean relative gap |ours - paper| / paper, without and with DFS reorder."""
    return {source: (float((abs(g.blocks_original - g.paper_blocks_original) / g.paper_blocks_original).mean()),
                     float((abs(g.blocks_dfs - g.paper_blocks_dfs) / g.paper_blocks_dfs).mean()))
            for source, g in df.dropna(subset=["paper_blocks_original"]).groupby("source")}


def table5_markdown(df: pd.DataFrame, trees_df: pd.DataFrame | None, trees_per_size: int, seed: int,
                    block: int, trees: str | None) -> str:
    parts = [f"# DySpec Table 5: non-zero {block}x{block} tiles of the tree attention mask",
             (f"Random trees, {trees_per_size} per size, seed {seed}; mean tiles of the tree-only "
              "size x size mask (tree size = nodes including the root = the mask's side; partial edge tiles "
              "count). `ours (paper)`: the paper's Table 5 in parentheses. original = the generator's creation "
              "order, BFS = bench.core.tree's slot layout, DFS = DySpec's reorder (children in rank order), heavy = "
              "heavy-path order (children by descending subtree size), the paper's near-optimal reference.")]
    gaps = closeness(df)
    for source, g in df.groupby("source", sort=False):
        shown = pd.DataFrame({
            "tree size": g.tree_size,
            "original": [beside(a, b) for a, b in zip(g.blocks_original, g.paper_blocks_original)],
            "BFS": [fmt(x, ".1f") for x in g.blocks_bfs],
            "DFS": [beside(a, b) for a, b in zip(g.blocks_dfs, g.paper_blocks_dfs)],
            "heavy": [fmt(x, ".1f") for x in g.blocks_heavy],
            "reduction (DFS)": [beside(a, b, ".2f") for a, b in zip(g.reduction_dfs, g.paper_reduction)],
            "reduction (heavy)": [fmt(x, ".2f") for x in g.reduction_heavy],
            "lower triangle": g.lower_triangle,
        })
        parts += [f"## generator `{source}`", GENERATOR_NOTES[source] + ".",
                  shown.to_markdown(index=False, disable_numparse=True)]
        if source in gaps:
            parts.append(f"Mean gap to the paper, |ours - paper| / paper over the paper's sizes: "
                         f"original {gaps[source][0]:.1%}, DFS {gaps[source][1]:.1%}.")
    parts += [("The paper does not say how its random trees were drawn. `recursive` was the first generator we "
               "tried and nothing in it was tuned to the paper's numbers; `greedy` is shaped like DySpec's own "
               "trees (earlier siblings own larger subtrees). DFS is not always better than the original order "
               "(tests/test_tree_order.py has a 5-node tree where it adds a tile), nor heavy-path always better "
               "than DFS; the table shows means."),
              ("Kernel times (Table 5's other columns) are not measured: only a block-sparse kernel that skips "
               "empty tiles (the paper's Triton kernel, on a GPU) can profit from the order; a dense kernel with a "
               "float mask computes every tile.")]
    if trees_df is not None:
        parts += [f"## Recorded trees from `{trees}`",
                  ("Per size bucket: mean tiles at prefix 0 per order, and at each tree's recorded prefix "
                   "(every prefix key visible to every tree node)."), trees_df.to_markdown(index=False, floatfmt=".2f")]
    return "\n\n".join(parts) + "\n"


# ---------------------------------------------------------------- Figures 9 and 7

def fig9_points(long: pd.DataFrame, sizes_col: str) -> pd.DataFrame:
    """Mean tiles per (source, size or bucket, prefix, order) over the prefix sweep."""
    sweep = long[~long.recorded] if "recorded" in long else long
    g = sweep.groupby(["source", sizes_col, "prefix_len", "order"], sort=True).blocks
    pts = pd.DataFrame({"blocks_mean": g.mean(), "trees": g.size()}).reset_index()
    return pts.rename(columns={sizes_col: "tree_size"})


def fig9(points: pd.DataFrame, title_of: dict[str, str], block: int, paper: pd.DataFrame):
    """One panel per source (the command line's order): mean tiles per prefix length, per size and order."""
    sources = [s for s in title_of if s in set(points.source)]
    fig = new_figure(figsize=(5.2 * len(sources), 4.2))
    axes = fig.subplots(1, len(sources), squeeze=False)[0]
    styles = {"original": "-", "bfs": ":", "dfs": "--", "heavy": "-."}
    for ax, source in zip(axes, sources):
        pts = points[points.source == source]
        one_size = pts.tree_size.nunique() == 1  # then all four orders, one colour each
        for i, (size, g) in enumerate(pts.groupby("tree_size", sort=False)):
            for j, (order, style) in enumerate(styles.items()):
                line = g[g.order == order]
                if one_size or order in ("original", "dfs"):
                    ax.plot(line.prefix_len, line.blocks_mean, style, marker="o", ms=3,
                            color=f"C{j if one_size else i}", label=f"{size} nodes: {order}")
        ax.set_title(title_of[source], fontsize=9)
        ax.set_xlabel("prefix length (tokens, all visible to every tree node)")
        ax.set_ylabel(f"non-zero {block}x{block} tiles (mean)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    quote = "; ".join(f"{s}: {g[~g.reorder].block_count.iloc[0]:.2f} -> {g[g.reorder].block_count.iloc[0]:.2f}"
                      for s, g in paper.groupby("tree_size"))
    fig.text(0.01, -0.04, f"Paper, Fig. 9 text (real DySpec trees, prefix length not given), tree size: "
             f"tiles original -> reordered: {quote}", fontsize=8)
    return fig


def fig7(parents, title: str, block: int):
    """Figure 7's picture: one tree's mask in original and DFS order, tile grid drawn, tiles counted."""
    fig = new_figure(figsize=(10, 5.2))
    for ax, order in zip(fig.subplots(1, 2), ("original", "dfs")):
        mask = tree_mask(permute(parents, ORDERS[order](parents)))
        ax.imshow(mask, cmap="Greys", interpolation="nearest")
        for edge in range(block, len(parents), block):
            ax.axhline(edge - 0.5, color="C1", lw=0.4)
            ax.axvline(edge - 0.5, color="C1", lw=0.4)
        ax.set_title(f"{order} order: {block_count(mask, block)} non-zero {block}x{block} tiles", fontsize=9)
        ax.set(xlabel="key (tree node)", ylabel="query (tree node)")
    fig.suptitle(title, fontsize=9)
    return fig


# ---------------------------------------------------------------- the artifact

def int_list(text: str | Iterable[int], name: str, minimum: int) -> list[int]:
    """Sorted distinct integers >= minimum from "a,b,c" (the CLI) or a list."""
    try:
        vals = [int(x) for x in (text.split(",") if isinstance(text, str) else text) if str(x).strip()]
    except ValueError:
        raise HarnessError(f"--{name} must be comma-separated integers, got {text!r}") from None
    if not vals or min(vals) < minimum:
        raise HarnessError(f"--{name} needs integers >= {minimum}, got {text!r}")
    return sorted(set(vals))


def dyspec_table5(runs: RunSet, sizes: str | Iterable[int] = "256,512,1024,2048",
                  trees_per_size: int = 20, seed: int = 0, generators: str = "recursive,greedy",
                  trees: str | None = None, prefixes: str | Iterable[int] = "0,128,256,512,1024",
                  fig_sizes: str | Iterable[int] = "768,1024", block: int = BLOCK) -> Report:
    """Shows no file: the CLI lists the paths (the table's markdown first)."""
    sizes = int_list(sizes, "sizes", 1)
    prefixes = int_list(prefixes, "prefixes", 0)
    fig_sizes = int_list(fig_sizes, "fig-sizes", 1)
    gens = [g.strip() for g in generators.split(",") if g.strip()]
    unknown = [g for g in gens if g not in GENERATORS]
    if unknown or not gens:
        raise HarnessError(f"--generators: unknown {unknown or gens}; known: {', '.join(GENERATORS)}")
    if trees_per_size < 1 or block < 1:
        raise HarnessError("--trees-per-size and --block must be >= 1")
    recorded = load_tree_file(Path(trees)) if trees else None  # fail before the long part

    rows = []
    for gen in gens:
        for size in sorted(set(sizes) | (set() if recorded else set(fig_sizes))):
            sweep = prefixes if (size in fig_sizes and not recorded) else [0]
            rows += synthetic_counts(gen, size, trees_per_size, seed, sorted({0, *sweep}), block)
    long = pd.DataFrame(rows)
    df = table5(long[long.tree_size.isin(sizes)], block, runs.paper(PAPER_CSV))

    if recorded:
        flong = pd.DataFrame(file_counts(recorded, prefixes, block))
        trees_df, points = trees_table(flong), fig9_points(flong, "bucket")
        titles = {"file": f"DySpec trees from {Path(trees).name} ({len(recorded)} trees, by size bucket)"}
        example, what = recorded[0][0], f"first tree of {Path(trees).name} ({len(recorded[0][0])} nodes)"
    else:
        trees_df, points = None, fig9_points(long[long.tree_size.isin(fig_sizes)], "tree_size")
        titles = {g: f"Synthetic: '{g}' random trees (not real DySpec trees), "
                     f"{trees_per_size} per size" for g in gens}
        size = min(fig_sizes)
        example = GENERATORS[gens[0]](size, np.random.default_rng([seed, 99, size]))
        what = f"a synthetic '{gens[0]}' random tree of {size} nodes (not a real DySpec tree)"
    return Report({"tables/dyspec_table5.md": table5_markdown(df, trees_df, trees_per_size, seed, block, trees),
                   "tables/dyspec_table5.csv": df,
                   **({"tables/dyspec_table5_trees.csv": trees_df} if trees_df is not None else {}),
                   "figures/dyspec_fig9_block_counts.png": fig9(points, titles, block, runs.paper(FIG9_CSV)),
                   "figures/dyspec_fig9_block_counts.csv": points,
                   "figures/dyspec_fig7_masks.png": fig7(example, f"Tree attention mask (black: visible), {what}",
                                                         block)})


# Block counts need no model: random trees by default; TREES=file.jsonl adds real DySpec trees, e.g. written by
# `python -m bench.run model=smollm2-135m dataset=c4 method=dyspec run.limit=3 method.record_trees=$PWD/results/dyspec_trees.jsonl`
ARTIFACT = Artifact(
    "table5", "Table 5, Figures 7 and 9 (mask tiles per tree order; no runs needed) -> "
    "tables/dyspec_table5.{md,csv}, figures/", dyspec_table5, rank=5,
    paper_csv=(PAPER_CSV, FIG9_CSV), covers=(Cover("Table 5"), Cover("Figure 7"), Cover("Figure 9")),
    recipes=(Recipe("reproduce-dyspec-table5", "DySpec Table 5 / Figs 7, 9: non-zero 32x32 tiles of tree "
                    "attention masks, with and without DFS reorder",
                    (("$(PY) -m bench.report dyspec/table5 --sizes 256,512,1024,2048 --trees-per-size 20 --seed 0 "
                      "$(if $(TREES),--trees $(TREES))"),)),),
    # No model: seeded random trees, 5 per size on the page (every page build and its tests recompute it;
    # `make reproduce-dyspec-table5` draws 20 per size).
    shown=(Shown("python -m bench.report dyspec/table5 --trees-per-size 5", {"trees_per_size": 5}),),
    options=(option("--sizes", help="tree sizes, nodes incl. the root (default 256,512,1024,2048)"),
             option("--trees-per-size", type=int, help="default 20"),
             option("--seed", type=int, help="default 0"),
             option("--generators", help="of recursive, greedy (default: both)"),
             option("--trees", help='recorded trees, JSONL of {"parents": [...], "prefix_len": int}'),
             option("--prefixes", help="prefix lengths for Figure 9 (default 0,128,256,512,1024)"),
             option("--fig-sizes", help="synthetic tree sizes for Figure 9 (default 768,1024)"),
             option("--block", type=int, help="tile side (default 32, DySpec's kernel)")),
    common=(), needs_runs=False)
