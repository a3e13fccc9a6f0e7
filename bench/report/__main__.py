"""The reports' one CLI: `python -m bench.report <paper>/<artifact> [options]`; `--list` names every artifact.

    python -m bench.report dyspec/table --paper-table 1 [--results results] [--model M] [--draft eagle]
    python -m bench.report <name> --help                # that artifact's own options
    python -m bench.report makefile                     # the reproduce-* make targets the Makefile includes

Bad input is one `error:` line on stderr: exit 2 for an unknown name or option, 1 for no runs/ or a report's error."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bench.cli import OneLineParser
from bench.errors import HarnessError
from bench.report.declare import COMMON, Artifact, option
from bench.report.makefile import makefile
from bench.report.registry import UnknownArtifact, aliases, names, produce, resolve

PROG = "bench.report"
RESULTS = option("--results", default="results", help="holds runs/; tables/, figures/ are written")


def parser(description: str, report: dict, options, **kwargs) -> OneLineParser:
    """The artifact's name as the positional `report` (its keywords), then `options`."""
    p = OneLineParser(prog=PROG, description=description, **kwargs)
    p.add_argument("report", **report)
    for o in options:
        p.add_argument(*o.flags, **o.kwargs)
    return p


def catalogue() -> str:
    """Every artifact with its one-line help, then the old names."""
    rows = [f"  {name:<24}{resolve(name)[1].help}" for name in names()]
    return "\n".join(["artifacts:", *rows, "commands:", *(f"  {n:<24}{h}" for n, h in COMMANDS.items()),
                      "aliases (old names):",
                      *(f"  {alias:<24}{name}" for alias, name in aliases().items())])


def find(guess: str, argv: list[str]) -> tuple[str, Artifact]:
    """The artifact named by `guess`, else by the first other word that names one: the first parser takes
    the value of an artifact's own option for the name when that option comes first."""
    for word in [guess, *(w for w in argv if not w.startswith("-") and w != guess)]:
        try:
            return resolve(word)
        except UnknownArtifact:
            continue
    return resolve(guess)  # none does: the error names the guess


def fail(message: str) -> int:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return 1


# The CLI's commands beside the artifacts (REPRODUCED.md and evidence/ are bench.page's: python -m bench.page).
COMMANDS = {"makefile": "the reproduce-* make targets from the declarations (the Makefile includes them)"}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    # The first parser finds the artifact's name among the common options (its own are left for its own parser).
    first = parser(__doc__.splitlines()[0], {"nargs": "?", "help": "an artifact name (see --list) or `list`"},
                   [option("--list", action="store_true", help="print every artifact name and exit"),
                    option("-h", "--help", action="store_true", help="show this help (or an artifact's) and exit"),
                    RESULTS, *COMMON.values()], add_help=False, formatter_class=argparse.RawDescriptionHelpFormatter)
    known, _ = first.parse_known_args(argv)
    if known.list or known.report == "list":
        print("\n".join(names()))
        return 0
    if known.report == "makefile":  # the reproduce-* targets, from the declarations (the Makefile includes them)
        print(makefile(), end="")
        return 0
    if known.report is None:
        if known.help:
            first.epilog = catalogue()
            first.print_help()
            return 0
        first.error("the following arguments are required: report (see --list)")
    try:
        name, artifact = find(known.report, argv)
    except UnknownArtifact as err:
        first.error(str(err))
    args = parser(f"{name}: {artifact.help}", {"help": name}, [RESULTS, *artifact.arguments]).parse_args(argv)
    if artifact.needs_runs and not Path(args.results, "runs").is_dir():
        return fail(f"no runs/ under {args.results!r}")
    options = {k: v for k, v in vars(args).items() if k not in ("report", "results") and v is not None}
    try:
        out = produce(artifact, args.results, **options)
    except HarnessError as err:
        return fail(str(err))
    if isinstance(out, str):
        print(out, end="")
    else:
        for path in out:
            print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
