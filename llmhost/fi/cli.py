"""Command-line helpers of fi_bench.py and fi_trace.py: a parser whose usage mistakes are one stderr line (exit 2),
and the comma-separated list types their flags use."""
from __future__ import annotations

import argparse
from collections.abc import Callable


class OneLineParser(argparse.ArgumentParser):
    """Usage mistakes end in one stderr line (what was wrong, where to look) and exit 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def int_list(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give positive integers")
    return values


def choice_list(allowed: dict) -> Callable[[str], tuple[str, ...]]:
    def parse(text: str) -> tuple[str, ...]:
        values = tuple(x.strip() for x in text.split(",") if x.strip())
        bad = [v for v in values if v not in allowed]
        if bad or not values:
            raise argparse.ArgumentTypeError(f"{','.join(bad) or text!r} not in {','.join(allowed)}")
        return values
    return parse
