"""DySpec Figures 9 and 7 (Appendix C): non-zero tiles of the tree attention mask against the prefix
length, and one tree's mask in original and DFS order. Called by table5.py, which counts the tiles."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from bench.report.dyspec.tree_order import ORDERS, block_count, permute, tree_mask
from bench.report.plots import new_figure

PAPER_CSV = Path(__file__).with_name("paper_tables") / "dyspec_fig9_block_counts.csv"


def paper_fig9() -> pd.DataFrame:
    return pd.read_csv(PAPER_CSV)


def fig9_points(long: pd.DataFrame, sizes_col: str) -> pd.DataFrame:
    """Mean tiles per (source, size or bucket, prefix, order) over the prefix sweep."""
    sweep = long[~long.recorded] if "recorded" in long else long
    g = sweep.groupby(["source", sizes_col, "prefix_len", "order"], sort=True).blocks
    pts = pd.DataFrame({"blocks_mean": g.mean(), "trees": g.size()}).reset_index()
    return pts.rename(columns={sizes_col: "tree_size"})


def fig9(points: pd.DataFrame, title_of: dict[str, str], block: int):
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
    paper = paper_fig9()
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
        ax.set_xlabel("key (tree node)")
        ax.set_ylabel("query (tree node)")
    fig.suptitle(title, fontsize=9)
    return fig
