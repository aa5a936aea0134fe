"""Micro-benchmarks behind the choices in docs/performance.md, in CPU time at one thread.

    python benchmarks/micro.py

CPU time (``time.process_time``) at one thread is what other processes on a shared machine
disturb least; each figure is the best of 5 repeats.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

B, H, KV, N, HS = 8, 4, 2, 256, 64  # llama-small's attention


def cpu_ms(fn: Callable[[], object], calls: int) -> float:
    for _ in range(2):
        fn()
    best = float("inf")
    for _ in range(5):
        begin = time.process_time()
        for _ in range(calls):
            fn()
        best = min(best, (time.process_time() - begin) / calls)
    return best * 1e3


def gqa_variants() -> dict[str, Callable[[], torch.Tensor]]:
    q = torch.randn(B, H, N, HS, requires_grad=True)
    k, v = (torch.randn(B, KV, N, HS, requires_grad=True) for _ in range(2))

    def expand(t: torch.Tensor) -> torch.Tensor:
        return t[:, :, None].expand(B, KV, H // KV, N, HS).reshape(B, H, N, HS)  # (B, h, N, hs)

    return {
        "enable_gqa": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True),
        "repeat_interleave": lambda: F.scaled_dot_product_attention(
            q, k.repeat_interleave(H // KV, 1), v.repeat_interleave(H // KV, 1), is_causal=True),
        "expand": lambda: F.scaled_dot_product_attention(q, expand(k), expand(v), is_causal=True),
    }


def rope_variants() -> dict[str, Callable[[], torch.Tensor]]:
    x = torch.randn(B, N, H, HS, requires_grad=True).transpose(1, 2)  # (B, h, N, hs) view, as attention has it
    cos, sin = torch.randn(N, HS // 2), torch.randn(N, HS // 2)
    cos_full, sin_full = torch.cat((cos, cos), -1), torch.cat((sin, sin), -1)  # (N, hs)

    def cat_halves() -> torch.Tensor:
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)

    def full_width() -> torch.Tensor:
        x1, x2 = x.chunk(2, dim=-1)
        return x * cos_full + torch.cat((-x2, x1), dim=-1) * sin_full

    return {"cat of rotated halves": cat_halves, "full-width tables": full_width}


def report(title: str, variants: dict[str, Callable[[], torch.Tensor]], calls: int) -> None:
    print(title)
    for name, fn in variants.items():
        with torch.no_grad():
            forward = cpu_ms(fn, calls)
        both = cpu_ms(lambda fn=fn: fn().sum().backward(), calls)
        print(f"  {name:24s} forward {forward:7.3f} ms   forward + backward {both:7.3f} ms")


def main() -> None:
    torch.set_num_threads(1)
    report(f"GQA attention, q ({B}, {H}, {N}, {HS}), k/v ({B}, {KV}, {N}, {HS}):", gqa_variants(), 10)
    report("RoPE of one (B, h, N, hs) tensor:", rope_variants(), 50)
    y = torch.randn(4, 256, 3072)
    print("GELU at (4, 256, 3072):")
    for approximate in ("tanh", "none"):
        print(f"  {approximate:5s} {cpu_ms(lambda a=approximate: F.gelu(y, approximate=a), 10):7.3f} ms")
    drop, z = torch.nn.Dropout(0.0), torch.randn(4, 4)
    print(f"nn.Dropout(0.0) call: {cpu_ms(lambda: drop(z), 20000) * 1e3:.2f} µs; "
          f"checking p instead: {cpu_ms(lambda: z if drop.p == 0 else drop(z), 20000) * 1e3:.2f} µs")


if __name__ == "__main__":
    main()
