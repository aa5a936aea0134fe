"""Reading a Hugging Face config.json into a blockspec spec, per family (issue 14: under 50 ms each).

    python benchmarks/config_read.py [--repeats 200]

For every family and architecture blockspec imports, the config transformers writes for it with every
key (its defaults) is read into a spec dict and structured into a ModelSpec. The peer is transformers
reading the same dict into its own config class (``AutoConfig.for_model``), timed in the same run.
Prints the median milliseconds per read for both and their ratio.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import blockspec  # noqa: E402
from blockspec.errors import CheckpointError  # noqa: E402
from blockspec.interop.families import FAMILIES  # noqa: E402
from blockspec.interop.hf_config import spec_dict  # noqa: E402


def full_config(model_type: str) -> dict:
    import transformers

    transformers.logging.set_verbosity_error()
    return transformers.AutoConfig.for_model(model_type).to_dict()


def median_ms(read, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        read()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=200)
    args = parser.parse_args()
    import transformers

    registry = blockspec.load_registry()
    print(f"{'family':<12} {'model_type':<12} {'blockspec ms':>12} {'transformers ms':>16} {'ratio':>6}")
    for family in FAMILIES:
        for model_type in dict.fromkeys(family.architectures.values()):
            config = full_config(model_type)
            try:
                spec_dict(config, file="config.json", name="m")
            except CheckpointError as error:
                print(f"{family.name:<12} {model_type:<12} refused: {str(error).splitlines()[0]}")
                continue
            ours = median_ms(lambda: blockspec.structure_spec(
                spec_dict(config, file="config.json", name="m"), registry), args.repeats)
            peer = median_ms(lambda: transformers.AutoConfig.for_model(**config), args.repeats)
            print(f"{family.name:<12} {model_type:<12} {ours:>12.3f} {peer:>16.3f} {ours / peer:>6.2f}")


if __name__ == "__main__":
    main()
