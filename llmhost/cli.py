"""The argument parser of the toolkit's Python entry points: a usage mistake is one line on stderr, exit 2.

argparse prints the whole usage block above its error; with a dozen flags that buries the one line that matters.
Here the error names the problem and where the full usage is. Stdlib only, Python 3.9 (smoke_test.py).
"""
from __future__ import annotations

import argparse
from typing import NoReturn


class Parser(argparse.ArgumentParser):
    """argparse.ArgumentParser whose errors are `prog: error: MESSAGE (see prog --help)`; subparsers inherit it."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")
