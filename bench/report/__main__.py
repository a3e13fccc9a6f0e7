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
from bench.report.makefile import makefile
from bench.report.registry import Artifact, UnknownArtifact, aliases, names, produce, resolve

PROG = "bench.report"
COMMON = {
    "model": (("--model",), {"help": "default: the model of the most recent matching run"}),
    "paper_size": (("--paper-size",), {"help": "the paper's rows to compare with; default: the runs'"}),
    "draft": (("--draft",), {"help": "the drafter whose runs to show: eagle, trained or a full name (eagle:<id>, "
                                     "trained:<id>); default: that of the most recent draft-model run"}),
}


def add_common(p: OneLineParser, which) -> None:
    p.add_argument("--results", default="results", help="holds runs/; tables/, figures/ are written")
    for key in which:
        flags, kwargs = COMMON[key]
        p.add_argument(*flags, default=None, **kwargs)


def first_parser() -> OneLineParser:
    """Finds the artifact's name among the common options (its own options are left for its parser)."""
    p = OneLineParser(prog=PROG, description=__doc__.splitlines()[0], add_help=False,
                      formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("report", nargs="?", help="an artifact name (see --list) or `list`")
    p.add_argument("--list", action="store_true", help="print every artifact name and exit")
    p.add_argument("-h", "--help", action="store_true", help="show this help (or an artifact's) and exit")
    add_common(p, COMMON)
    return p


def catalogue() -> str:
    """Every artifact with its one-line help, then the old names."""
    rows = [f"  {name:<24}{resolve(name)[1].help}" for name in names()]
    return "\n".join(["artifacts:", *rows, "aliases (old names):",
                      *(f"  {alias:<24}{name}" for alias, name in aliases().items())])


def artifact_parser(name: str, artifact: Artifact) -> OneLineParser:
    p = OneLineParser(prog=PROG, description=f"{name}: {artifact.help}")
    p.add_argument("report", help=name)
    add_common(p, artifact.common)
    for o in artifact.options:
        p.add_argument(*o.flags, **o.kwargs)
    return p


def find(guess: str, argv: list[str]) -> tuple[str, Artifact]:
    """The artifact named by `guess`, else by the first other word that names one: the first parser takes
    the value of an artifact's own option for the name when that option comes first."""
    try:
        return resolve(guess)
    except UnknownArtifact:
        pass
    for word in (w for w in argv if not w.startswith("-") and w != guess):
        try:
            return resolve(word)
        except UnknownArtifact:
            continue
    return resolve(guess)  # none does: the error names the guess


def fail(message: str) -> int:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return 1


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    first = first_parser()
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
    args = artifact_parser(name, artifact).parse_args(argv)
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
