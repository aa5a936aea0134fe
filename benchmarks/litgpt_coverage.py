"""litgpt coverage: every litgpt named config as a blockspec spec, its parameters counted on the meta device.

    pip download litgpt==0.5.13 --no-deps -d wheels && unzip -q wheels/litgpt-0.5.13-py3-none-any.whl -d litgpt-0.5.13
    python benchmarks/litgpt_coverage.py --litgpt litgpt-0.5.13/ [--logits N] [--only NAME...]

Each config goes through benchmarks/litgpt_convert.py to TOML, blockspec.loads_spec (validated as a user's
spec is) and blockspec.build on meta; litgpt's own GPT(config), built on meta too, gives the reference count.
--logits N: every config scaled down (TINY), litgpt's random weights mapped into blockspec, N tokens, logits compared.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script: the repository root holds the benchmarks package

import torch  # noqa: E402

import blockspec  # noqa: E402
from benchmarks.litgpt_convert import Unsupported, convert, import_litgpt  # noqa: E402

FETCH = ("pip download litgpt==0.5.13 --no-deps -d wheels && "
         "unzip -q wheels/litgpt-0.5.13-py3-none-any.whl -d litgpt-0.5.13")
FAMILIES = (  # (family, name pattern): the first match names a config's family
    ("Gemma 3", r"^Gemma-3"), ("Gemma 2", r"^Gemma-2-"), ("Gemma", r"Gemma"), ("OLMo 2", r"^OLMo-2"),
    ("OLMo", r"^OLMo"), ("Phi-1.5/2", r"^phi-[12]"), ("Phi-3", r"^Phi-3"), ("Phi-4", r"(?i)^phi-4"),
    ("Pythia", r"^pythia"), ("StableLM/StableCode", r"(?i)^stable|^FreeWilly"), ("Falcon 3", r"^Falcon3"),
    ("Falcon", r"^falcon"), ("Mixtral", r"^Mixtral"), ("Mistral", r"Mistral|Mathstral"),
    ("Qwen3 MoE", r"^Qwen3-.*A\d+B"), ("Qwen3", r"^Qwen3"), ("Qwen2.5/QwQ", r"^Qwen2\.5|^QwQ"),
    ("SmolLM2", r"^SmolLM2"), ("Salamandra", r"^salamandra"), ("Code Llama", r"^CodeLlama"),
    ("Llama 3", r"Llama-3|R1-Distill-Llama"), ("Llama 2", r"(?i)llama-2|Platypus"),
    ("Llama-architecture others", r"llama|Llama"),
)


@dataclass(frozen=True)
class Result:
    """One config: its family, litgpt's count, blockspec's (None when it did not convert) and why not."""

    name: str
    family: str
    litgpt: int
    blockspec: int | None
    problem: str = ""

    @property
    def exact(self) -> bool:
        return self.blockspec == self.litgpt


def family(name: str) -> str:
    """The family a config name belongs to, by FAMILIES' first matching pattern."""
    return next((label for label, pattern in FAMILIES if re.search(pattern, name)), "other")


def litgpt_count(litgpt_model: Any, config: Any) -> int:
    """litgpt's GPT(config) on the meta device: every parameter once (lm_head and wte are separate tensors)."""
    with torch.device("meta"):
        model = litgpt_model.GPT(config)
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())


def to_spec(config: Any, registry: blockspec.Registry) -> blockspec.ModelSpec:
    """Through the public loader: the TOML text validated exactly as a user's file would be."""
    return blockspec.loads_spec(convert(config), registry, file=f"{config.name}.toml")


def measure(config: Any, litgpt_model: Any, registry: blockspec.Registry) -> Result:
    """Convert, validate and build one config on meta, and count it against litgpt's GPT."""
    reference = litgpt_count(litgpt_model, config)
    try:
        spec = to_spec(config, registry)
        model = blockspec.build(spec, registry=registry, device="meta")
    except (Unsupported, blockspec.BlockspecError) as error:
        return Result(config.name, family(config.name), reference, None, " ".join(str(error).split()))
    count = sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
    return Result(config.name, family(config.name), reference, count)


def run_all(litgpt_dir: Path, only: list[str] | None = None) -> list[Result]:
    """Every named config in litgpt.config.configs (or those in ``only``), measured in litgpt's order."""
    config_module, litgpt_model = import_litgpt(litgpt_dir)
    registry = blockspec.load_registry()
    names = [c["name"] for c in config_module.configs if not only or c["name"] in only]
    return [measure(config_module.Config.from_name(name), litgpt_model, registry) for name in names]


def family_table(results: list[Result]) -> list[str]:
    """One row per family: configs, converted, exact counts, and an example's parameter count."""
    rows = ["| family | configs | convert | count exactly | e.g. | litgpt parameters |",
            "|---|---:|---:|---:|---|---:|"]
    for label in dict.fromkeys(r.family for r in results):
        group = [r for r in results if r.family == label]
        converted = sum(r.blockspec is not None for r in group)
        rows.append(f"| {label} | {len(group)} | {converted} | {sum(r.exact for r in group)} | {group[0].name} "
                    f"| {group[0].litgpt:,} |")
    return rows


def summary(results: list[Result]) -> list[str]:
    """The summary line, then one line per config that failed to convert or to count exactly."""
    converted = sum(r.blockspec is not None for r in results)
    exact = sum(r.exact for r in results)
    lines = [f"{converted} of {len(results)} configs convert; {exact} count exactly"]
    for r in results:
        if r.blockspec is None:
            lines.append(f"FAIL {r.name}: {r.problem}")
        elif not r.exact:
            lines.append(f"FAIL {r.name}: blockspec {r.blockspec:,} vs litgpt {r.litgpt:,}")
    return lines


TINY = {"n_embd": 64, "n_head": 4, "head_size": 16, "intermediate_size": 96, "padded_vocab_size": 128,
        "vocab_size": 128, "block_size": 64}  # a scaled-down model: the config's wiring, tiny sizes
LOGITS_LIMIT = 1e-4  # of the largest logit: both keep RoPE tables in float32, litgpt RMSNorm too (measured 2e-5)


def tiny_config(config_module: Any, name: str) -> Any:
    """The named config at TINY sizes, six layers at most (Gemma 3's period), windows of 8 tokens, Llama 3's
    RoPE bands scaled to a 16-token original context."""
    given = config_module.Config.from_name(name)
    groups = given.n_query_groups
    tiny = {**TINY, "n_layer": min(given.n_layer, 6),
            "n_query_groups": 1 if groups == 1 else (4 if groups == given.n_head else 2)}
    if given.moe_intermediate_size:
        tiny["moe_intermediate_size"] = 32
    if given.n_expert:
        tiny.update(n_expert=4, n_expert_per_token=min(2, given.n_expert_per_token))
    if given.sliding_window_size:
        tiny["sliding_window_size"] = 8
    if given.rope_adjustments and "original_max_seq_len" in given.rope_adjustments:
        tiny["rope_adjustments"] = {**given.rope_adjustments, "original_max_seq_len": 16}  # bands inside 64 tokens
    return replace(given, **tiny)


def blockspec_key(key: str, block: str) -> str:
    """A litgpt state-dict key -> blockspec's; output-norm blocks call their post norms norm1/norm2."""
    post = ("norm1", "norm2") if block == "output_norm" else ("post_attn_norm", "post_ffn_norm")
    names = {"norm_1": "norm1", "norm_2": "norm2", "post_attention_norm": post[0], "post_mlp_norm": post[1],
             "norm_q": "q_norm", "norm_k": "k_norm", "mlp": "ffn", "fc": "up", "gate": "router"}
    if key.startswith("transformer.h."):
        parts = key.removeprefix("transformer.h.").split(".")
        return ".".join(["blocks"] + [names.get(p, p) for p in parts]).replace("ffn.proj", "ffn.down")
    return {"transformer.wte.weight": "embedding.weight"}.get(key, key.replace("transformer.ln_f", "final_norm")
                                                                   .replace("lm_head", "head"))


def mapped_weights(state: dict[str, torch.Tensor], block: str, n_expert: int) -> dict[str, torch.Tensor]:
    """litgpt's weights in blockspec's names: fc_1 and fc_2 stacked into up (gate first), experts into (E, ...)."""
    out: dict[str, torch.Tensor] = {}
    for key, value in state.items():
        if ".fc_2." in key or ".experts." in key:
            continue
        if ".fc_1." in key:
            key, value = key.replace("fc_1", "fc"), torch.cat([value, state[key.replace("fc_1", "fc_2")]])
        out[blockspec_key(key, block)] = value
    for key in {k.split(".experts.")[0] for k in state if ".experts." in k}:
        experts = [f"{key}.experts.{e}" for e in range(n_expert)]
        up = [torch.cat([state[f"{e}.fc_1.weight"], state[f"{e}.fc_2.weight"]]) for e in experts]
        out[blockspec_key(key, block) + ".up"] = torch.stack(up)
        out[blockspec_key(key, block) + ".down"] = torch.stack([state[f"{e}.proj.weight"] for e in experts])
    return out


def logits_difference(config: Any, litgpt_model: Any, registry: blockspec.Registry, tokens: int) -> float:
    """max |litgpt - blockspec| / max |litgpt| over two random sequences' logits, the same random weights."""
    torch.manual_seed(0)
    reference = litgpt_model.GPT(config).eval()
    with torch.no_grad():  # norms start at 1 (or 0 for (1 + w)): move them off it, so a misplaced one shows
        for key, value in reference.named_parameters():
            scale = 1.0 if "norm" in key and key.endswith(".weight") else 0.0
            value.normal_(0.0, 0.1 if value.dim() == 1 else 0.2).add_(scale)
    spec = to_spec(config, registry)
    ours = blockspec.build(spec, registry=registry).eval()
    block = spec.block.use.split(":")[-1] if spec.block else "pre"
    ours.load_state_dict(mapped_weights(reference.state_dict(), block, config.n_expert), strict=True)
    ids = torch.randint(0, config.padded_vocab_size, (2, tokens))
    with torch.no_grad():
        expected = reference(ids)
        return ((expected - ours(ids)).abs().max() / expected.abs().max()).item()


def logits_rows(litgpt_dir: Path, tokens: int, only: list[str] | None = None) -> tuple[list[str], float]:
    """Every config scaled down (or those in ``only``): per family, the largest relative logit difference."""
    config_module, litgpt_model = import_litgpt(litgpt_dir)
    registry = blockspec.load_registry()
    worst: dict[str, tuple[float, str, int]] = {}
    for name in [c["name"] for c in config_module.configs if not only or c["name"] in only]:
        try:
            diff = logits_difference(tiny_config(config_module, name), litgpt_model, registry, tokens)
        except (Unsupported, blockspec.BlockspecError, RuntimeError, KeyError) as error:
            print(f"FAIL logits {name}: {' '.join(str(error).split())[:300]}")
            diff = float("inf")
        label, (top, where, n) = family(name), worst.get(family(name), (-1.0, "", 0))
        worst[label] = (diff, name, n + 1) if diff > top else (top, where, n + 1)
    rows = ["| family | configs | largest max abs logit difference / max abs logit | in |", "|---|---:|---:|---|"]
    rows += [f"| {label} | {n} | {diff:.2e} | {name} |" for label, (diff, name, n) in worst.items()]
    return rows, max(diff for diff, _, _ in worst.values())


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--litgpt", type=Path, help=f"an unpacked litgpt wheel or checkout; fetch one: {FETCH}")
    parser.add_argument("--only", nargs="*", help="just these config names")
    parser.add_argument("--logits", type=int, metavar="N",
                        help="also compare logits of N tokens (at most 64), every config scaled down")
    parser.add_argument("--verbose", action="store_true", help="print every config's counts")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.litgpt is None:
        print(f"--litgpt DIR is required: an unpacked litgpt 0.5.13 wheel. Fetch one with\n  {FETCH}")
        return 2
    if args.logits is not None and not 1 <= args.logits <= TINY["block_size"]:
        print(f"--logits: expected 1 to {TINY['block_size']} tokens (the scaled-down context), found {args.logits}")
        return 2
    started = time.perf_counter()
    try:
        results = run_all(args.litgpt, args.only)
    except FileNotFoundError as error:
        print(f"--litgpt: {error}; fetch one with\n  {FETCH}")
        return 2
    print(f"litgpt named configs: {len(results)}")
    for r in results if args.verbose else []:
        print(f"{r.name:45} {r.litgpt:>18,} {r.blockspec or 0:>18,} {'ok' if r.exact else 'FAIL'}")
    print("\n".join(family_table(results) + [""] + summary(results)))
    print(f"({time.perf_counter() - started:.0f} s)")
    largest = 0.0
    if args.logits:
        rows, largest = logits_rows(args.litgpt, args.logits, args.only)
        print("\n".join(["", *rows, "", f"largest relative logit difference {largest:.2e} (limit {LOGITS_LIMIT:g})"]))
    return 0 if all(r.exact for r in results) and largest <= LOGITS_LIMIT else 1


if __name__ == "__main__":
    sys.exit(main())
