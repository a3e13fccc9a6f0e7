"""REPRODUCED.md and the evidence behind it: `python -m bench.page reproduced` (make reproduced) rebuilds the page
from evidence/ alone; `python -m bench.page evidence` (make evidence) copies the runs the page uses from --results
into evidence/. Bad input is one `error:` line on stderr and exit 1 (2 for a bad option)."""

from __future__ import annotations

import sys

from bench.cli import OneLineParser
from bench.errors import HarnessError
from bench.paths import project_path

PROG = "bench.page"


def main(argv: list[str] | None = None) -> int:
    p = OneLineParser(prog=PROG, description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    page = sub.add_parser("reproduced", help="REPRODUCED.md from evidence/ only (a summary, then every paper's "
                          "tables with their runs)")
    page.add_argument("--out", help="default: REPRODUCED.md at the project root")
    page.add_argument("--evidence", help="the evidence folder (default evidence/)")
    copy = sub.add_parser("evidence", help="copy the runs REPRODUCED.md uses from --results into evidence/ "
                          "(summaries, configs, records without token ids)")
    copy.add_argument("--results", default="results", help="holds runs/")
    copy.add_argument("--out", help="default: evidence/ at the project root")
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        if args.command == "reproduced":
            if args.evidence and not project_path(args.evidence).is_dir():  # a typo, not a clone without evidence/
                raise HarnessError(f"no evidence folder {args.evidence!r}")
            from bench.page.reproduced import reproduced_page
            out = reproduced_page(out=args.out, evidence=args.evidence)
        else:
            from bench.page.evidence import build_evidence
            out = build_evidence(args.results, args.out)
    except HarnessError as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return 1
    print(out, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
