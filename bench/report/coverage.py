"""Every artifact of every paper (/work/shared/papers/README.md's lists, and the figures the papers add), with the
report artifact that builds it: the rows of REPRODUCED.md's summary table. A data table: edit it when a target
is added.

Status on the page: "measured" (its section used runs), "not measured" (a target, no runs in evidence/ yet),
"not measurable offline" (OFFLINE's reason: needs the hub or hardware this harness does not have) or "no target".

CLAIMED: the paper's own method(s), whose speedup over AR (paired intervals, bench.run.metrics.speedup_interval)
is the claim every measured artifact of the paper is checked against on the summary.
"""

from __future__ import annotations

from typing import NamedTuple


class Row(NamedTuple):
    paper: str  # the paper package under bench/report/
    label: str  # the paper's name for it
    artifact: str | None = None  # our artifact (None: no target yet)
    options: dict = {}  # noqa: RUF012 (read only); a section matches when its options include these
    offline: str | None = None  # why it cannot be measured offline, when it cannot


COVERAGE = (
    Row("dyspec", "Table 1", "table", {"paper_table": 1}),
    Row("dyspec", "Table 2", "table", {"paper_table": 2}, offline="llama-68m -> Llama-2-13B: the hub and a GPU"),
    Row("dyspec", "Table 3", "table", {"paper_table": 3}, offline="Llama-2-7B -> Llama-2-70B: the hub and GPUs"),
    Row("dyspec", "Table 4", "table", {"paper_table": 4}),
    Row("dyspec", "Figure 2", "fig2"),
    Row("dyspec", "Figure 4", "time_breakdown"),
    Row("dyspec", "Figure 5", "fig5"),
    Row("dyspec", "Table 5", "table5"),
    Row("dyspec", "Figure 7", "table5"),
    Row("dyspec", "Figure 9", "table5"),
    Row("holistic", "Tables 1-2", "table1"),
    Row("holistic", "Figure 2", "fig2"),  # (b), (c) from runs with run.record_steps=true
    Row("holistic", "Table 3", "table3"),
    Row("holistic", "Table 4", "table4"),
    Row("holistic", "Table 9", "table9"),
    Row("holistic", "Table 10", "table10"),
    Row("holistic", "Figure 4", "fig4"),
    Row("holistic", "Figure 5", "fig5"),
    Row("propd", "Table 1", "table1"),
    Row("propd", "Table 2", "table2"),
    Row("propd", "Table 3", "table3"),
    Row("propd", "Figure 3", "fig3"),
    Row("propd", "Figure 6", "fig6"),
    Row("propd", "Figure 7", "fig7"),
    Row("token_recycling", "Table 1", "table1"),
    Row("token_recycling", "Figure 3", "fig3"),
    Row("token_recycling", "Figure 4", "fig4"),
)

CLAIMED = {"dyspec": ("dyspec",), "holistic": ("holistic",), "propd": ("propd",),
           "token_recycling": ("token_recycling",)}


def rows_of(paper: str) -> list[Row]:
    return [r for r in COVERAGE if r.paper == paper]
