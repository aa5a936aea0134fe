"""Measure blockspec against a hand-written model and Hugging Face, side by side in one run.

    python benchmarks/run.py --out benchmarks/results

writes results.json and results.md there and prints the table. See docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # run as a script: the repository root holds the benchmarks package

import torch  # noqa: E402

import blockspec  # noqa: E402
from benchmarks import (adapters, cases, compiled, evaluation, generation, graph_breaks, memory,  # noqa: E402
                        registry_costs, report, speed, static_decode)

SECTIONS = ("speed", "memory", "build", "generation", "eval", "registry", "graph_breaks", "compile",
            "static_decode", "adapters")  # the order they run in
CASE_SECTIONS = ("speed", "memory", "build", "generation", "eval", "compile", "static_decode")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE / "results", help="folder for results.json and results.md")
    parser.add_argument("--cases", nargs="*", help=f"subset of {[c.name for c in cases.CASES]}")
    parser.add_argument("--sections", nargs="*", choices=SECTIONS, help="subset of the measurements")
    parser.add_argument("--rounds", type=float, default=1.0, help="scale every case's number of rounds")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's own choice)")
    return parser.parse_args(argv)


def machine(threads: int, rounds: int) -> dict[str, object]:
    matmul = speed.matmul_gflops(rounds)
    return {
        "torch": torch.__version__, "python": platform.python_version(), "cpu": platform.processor() or platform.machine(),
        "torch_threads": threads, "matmul_2048_gflops": speed.matmul_flops() / matmul.median / 1e9,
        "matmul_2048": matmul.as_dict(), "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
    }


def case_steps(case: cases.Case, registry: blockspec.Registry, scale: float, threads: int) -> dict[str, object]:
    """Each per-case measurement as a callable, by section name."""
    rounds = max(3, round(case.rounds * scale))
    return {
        "speed": lambda: speed.compare(case, registry, rounds),
        "build": lambda: speed.build_times(case, registry, max(3, rounds // 2)),
        "memory": lambda: memory.compare(case.name, threads, case.memory_repeats),
        "generation": lambda: generation.compare(case, registry, max(3, rounds // 3)),
        "compile": lambda: compiled.compare(case, registry, max(3, rounds // 2)),
        "static_decode": lambda: static_decode.compare(case, registry, max(3, rounds // 3)),
        "eval": lambda: evaluation.compare(case, registry, max(3, rounds // 3)),
    }


def global_steps(registry: blockspec.Registry, scale: float, threads: int) -> dict[str, object]:
    """The measurements that are not per case."""
    return {
        "adapters": lambda: adapters.compare(registry, max(3, round(adapters.ROUNDS * scale)), threads),
        "graph_breaks": lambda: [graph_breaks.check_combo(c, registry, training=t)
                                 for c in graph_breaks.first_party_combos(registry) for t in (False, True)],
        "registry": lambda: {"discovery": registry_costs.discovery(5), "list": registry_costs.cli_list(5),
                             "meta_count_70b": registry_costs.meta_count(cases.SEVENTY_B, 5)},
    }


def run(argv: list[str] | None = None) -> dict[str, object]:
    """Section by section (every case of a section before the next), saving after each measurement."""
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    threads, registry = torch.get_num_threads(), blockspec.load_registry()
    results: dict[str, object] = {"machine": machine(threads, max(3, round(10 * args.rounds))), "cases": {}}
    chosen = cases.by_name(args.cases)
    per_case = {c.name: case_steps(c, registry, args.rounds, threads) for c in chosen}
    for section in [s for s in SECTIONS if s in set(args.sections or SECTIONS)]:
        for case in chosen if section in CASE_SECTIONS else [None]:
            _log(f"{section}{'' if case is None else ': ' + case.name}")
            if case is None:
                results[section] = global_steps(registry, args.rounds, threads)[section]()
            else:
                entry = results["cases"].setdefault(case.name, {"batch": case.batch, "tokens": case.tokens})
                entry[section] = per_case[case.name][section]()
            write(results, args.out, quiet=True)  # partial results survive an interrupted run
    results["machine"]["finished"] = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    results["machine"]["matmul_2048_gflops_end"] = speed.matmul_flops() / speed.matmul_gflops(10).median / 1e9
    write(results, args.out)
    return results


def _log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def write(results: dict[str, object], out: Path, *, quiet: bool = False) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=2, default=str) + "\n")
    table = report.markdown(results)
    (out / "results.md").write_text(table)
    if not quiet:
        print(table)


if __name__ == "__main__":
    run()
