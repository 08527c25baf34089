"""The argument parser of the toolkit's Python entry points: a usage mistake is one line on stderr, exit 2.

argparse prints the whole usage block above its error; with a dozen flags that buries the one line that matters.
Here the error names the problem and where the full usage is. Stdlib only, Python 3.9 (smoke_test.py).
"""
from __future__ import annotations

import argparse
import math
from typing import NoReturn


class Parser(argparse.ArgumentParser):
    """argparse.ArgumentParser whose errors are `prog: error: MESSAGE (see prog --help)`; subparsers inherit it."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


# --- comma-separated option values (run_bench.py's --concurrency, --rates, --patterns) ---

def names_list(text: str | None) -> tuple[str, ...] | None:
    return None if text is None else tuple(x.strip() for x in text.split(",") if x.strip())


def levels(text: str | None, kind: type) -> tuple | None:
    """'1,16,64' -> (1, 16, 64) in the given type; None when the flag was not given (usage_problem checked it)."""
    return None if text is None else tuple(kind(x) for x in text.split(",") if x.strip())


def levels_problem(flag: str, text: str | None, kind: type) -> str | None:
    if text is None:
        return None
    try:
        values = levels(text, kind)
    except ValueError:
        values = ()
    if not values or any(not math.isfinite(v) or v <= 0 for v in values):
        example = "1,16,64" if kind is int else "2,8,16"
        return f"{flag} {text!r}: give positive {'whole numbers' if kind is int else 'numbers'} like {example}"
    seen = [f"{v:g}" for v in values]  # as point ids and the load generator spell them
    twice = next((v for v in seen if seen.count(v) > 1), None)
    return f"{flag} {text!r}: {twice} is given twice (each level is one point)" if twice else None
