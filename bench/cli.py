"""The one argparse parser of the project's CLIs: errors are one line, not argparse's usage block."""

from __future__ import annotations

import argparse


class OneLineParser(argparse.ArgumentParser):
    def error(self, message):
        # One line on stderr so scripts and CI logs stay readable.
        self.exit(2, f"{self.prog}: error: {message}\n")


def run_script(main, argv: list[str] | None = None) -> None:
    """A script's entry point: exits with main(argv)'s status. Ctrl-C and an output folder that cannot be written
    (a file in its place, a missing parent) are one `error:` line, not a traceback: every cache a script writes is
    renamed into place whole (bench.cachefile), so an interrupted one keeps its last complete state."""
    import sys

    try:
        code = main(sys.argv[1:] if argv is None else argv)
    except KeyboardInterrupt:
        print("error: interrupted; every cache keeps its last complete state, and the same command starts again",
              file=sys.stderr)
        code = 130
    except OSError as err:  # NotADirectoryError, FileExistsError (a lock beside a file), PermissionError
        print(f"error: {err}", file=sys.stderr)
        code = 1
    sys.exit(code)
