#!/usr/bin/env python3
"""The mutation score per module from a finished `mutmut run` (tests/mutation.sh calls it).

    python tests/mutation_score.py mutants                 # table: killed / survived / no tests, score per module
    python tests/mutation_score.py mutants --survivors     # also every surviving mutant's name (mutmut show NAME)
Score = killed / (killed + survived + no tests): a mutant no selected test reaches counts as missed, and a timeout
(the mutant looped) as killed; mutants a restricted run skipped ("not run") stay out of it.
Reads mutants/**/*.py.meta; writes nothing.
"""
from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path

# mutmut 3's exit codes (mutmut/stats.py): pytest's own codes, plus its markers for no tests and timeouts
OUTCOME = {1: "killed", 3: "killed", 36: "killed", 24: "killed", -24: "killed", 152: "killed", 255: "killed",
           0: "survived", 5: "no tests", 33: "no tests", None: "not run"}
COLUMNS = ("killed", "survived", "no tests", "not run", "other")


def tally(root: Path) -> tuple[dict[str, collections.Counter], list[str]]:
    """module -> outcome counts, and the names of the mutants that survived or met no test."""
    by_module: dict[str, collections.Counter] = {}
    missed = []
    for meta in sorted(root.rglob("*.py.meta")):
        codes = json.loads(meta.read_text())["exit_code_by_key"]
        if all(code is None for code in codes.values()):
            continue  # nothing of this module ran (an empty file, or a run restricted to other mutants)
        module = str(meta.relative_to(root)).removesuffix(".meta")
        counts = by_module.setdefault(module, collections.Counter())
        for name, code in codes.items():
            outcome = OUTCOME.get(code, "other")
            counts[outcome] += 1
            if outcome in ("survived", "no tests"):
                missed.append(f"{name}: {outcome}")
    return by_module, missed


def score(c: collections.Counter) -> float:
    judged = c["killed"] + c["survived"] + c["no tests"]
    return 100.0 * c["killed"] / judged if judged else float("nan")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("root", type=Path, help="mutmut's working copy (default layout: mutants)")
    parser.add_argument("--survivors", action="store_true", help="list the mutants not killed (default: off)")
    args = parser.parse_args(argv)
    if not args.root.is_dir():
        parser.error(f"{args.root} is not a directory — run ./tests/mutation.sh first")
    by_module, missed = tally(args.root)
    if not by_module:
        print(f"[mutation] error: no mutmut results under {args.root} — run ./tests/mutation.sh", file=sys.stderr)
        return 1
    total: collections.Counter = collections.Counter()
    print(f"{'module':32} " + " ".join(f"{c:>8}" for c in COLUMNS) + "    score")
    for module, counts in by_module.items():
        total.update(counts)
        print(f"{module:32} " + " ".join(f"{counts[c]:8d}" for c in COLUMNS) + f"  {score(counts):6.1f}%")
    print(f"{'all':32} " + " ".join(f"{total[c]:8d}" for c in COLUMNS) + f"  {score(total):6.1f}%")
    if args.survivors:
        print("\n".join(missed))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
