"""``python -m tests.verify.corpus``: the mutation score, and for each mutant the property that caught it.

Exit 0 when every mutant is caught by the property it names and every correct component passes.
"""

from __future__ import annotations

import argparse
import sys
import time

from blockspec.testing.runner import DEFAULT_MAX_EXAMPLES
from tests.verify.corpus import KIND_MODULES, entries
from tests.verify.corpus.score import Verdict, judge


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tests.verify.corpus", description=__doc__.splitlines()[0])
    parser.add_argument("--max-examples", type=int, default=DEFAULT_MAX_EXAMPLES, metavar="N",
                        help=f"hypothesis examples per property (default {DEFAULT_MAX_EXAMPLES}, the CLI's)")
    parser.add_argument("--every", action="store_true",
                        help="run every property on each mutant, not only the one it names (slower)")
    parser.add_argument("--kind", choices=KIND_MODULES, help="only the corpus of one kind")
    return parser.parse_args(argv)


def mutant_line(v: Verdict) -> str:
    name = f"{v.entry.qualified:<38}"
    if v.caught:
        also = [p for p in v.failed if p != v.entry.catches]
        return f"  caught  {name} by {v.entry.catches}" + (f" (also: {', '.join(also)})" if also else "")
    by = f" (caught by {', '.join(v.failed)} instead)" if v.failed else ""
    return f"  MISSED  {name} {v.detail}{by}   [{v.entry.bug}]"


def correct_line(v: Verdict) -> str:
    status = "pass" if v.caught else "FAIL"
    tail = "" if v.caught else f" {v.detail}"
    return f"  {status:<6}  {v.entry.qualified:<38} [{v.entry.bug}]{tail}"


def report(verdicts: list[Verdict], seconds: float) -> bool:
    mutants = [v for v in verdicts if v.entry.catches is not None]
    correct = [v for v in verdicts if v.entry.catches is None]
    caught, passing = sum(v.caught for v in mutants), sum(v.caught for v in correct)
    share = f" ({100 * caught / len(mutants):.0f}%)" if mutants else ""
    print(f"mutation score: {caught}/{len(mutants)}{share} caught by the property that names the broken promise")
    print("\n".join(mutant_line(v) for v in mutants))
    print(f"correct but unusual: {passing}/{len(correct)} pass every property")
    print("\n".join(correct_line(v) for v in correct))
    print(f"{seconds:.0f} s")
    return caught == len(mutants) and passing == len(correct)


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    chosen = [e for e in entries() if args.kind in (None, e.kind)]
    began = time.perf_counter()
    verdicts = judge(chosen, max_examples=args.max_examples, every=args.every)
    return 0 if report(verdicts, time.perf_counter() - began) else 1


if __name__ == "__main__":
    sys.exit(main())
