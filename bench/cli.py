"""The one argparse parser of the project's CLIs: errors are one line, not argparse's usage block."""

from __future__ import annotations

import argparse


class OneLineParser(argparse.ArgumentParser):
    def error(self, message):
        # One line on stderr so scripts and CI logs stay readable.
        self.exit(2, f"{self.prog}: error: {message}\n")
