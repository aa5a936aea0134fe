"""Rotary position embedding (RoFormer): q and k turned by an angle proportional to position.

The scalings stretch the frequencies θ_i = base^(-2i/d) for long contexts exactly as transformers' rope
types do (modeling_rope_utils: linear, dynamic, llama3, yarn, longrope), computed here in float64.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from blockspec.plugin import PositionalEncoding, Start, positions
from blockspec_positional import rotary_width


@dataclass(frozen=True)
class Scaling:
    """A RoPE scaling with its defaults filled in; ``kind`` "none" leaves the frequencies as they are."""

    kind: str = "none"
    factor: float = 1.0
    original_context_length: int = 1
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    attention_factor: float | None = None  # yarn; None: 0.1·ln(factor) + 1
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    truncate: bool = True
    short_factor: tuple[float, ...] = ()  # longrope: θ_i / short_factor[i] for calls ending at or before L0
    long_factor: tuple[float, ...] = ()  # longrope: θ_i / long_factor[i] for calls ending past L0

    def magnitude(self, context_length: int = 1) -> float:
        """What cos and sin are multiplied by: yarn's or longrope's attention factor, 1 otherwise."""
        if self.kind not in ("yarn", "longrope"):
            return 1.0
        if self.attention_factor is not None:
            return self.attention_factor
        if self.kind == "longrope":  # transformers: factor = max_position_embeddings / original, as Phi-3 has it
            stretch = context_length / self.original_context_length
            return math.sqrt(1 + math.log(stretch) / math.log(self.original_context_length)) if stretch > 1 else 1.0
        return 0.1 * math.log(self.factor) + 1.0 if self.factor > 1 else 1.0

    def long(self, end: int) -> bool:
        """Whether a longrope call whose last position is end - 1 takes the long factors: transformers compares
        max(position_ids) + 1, the cache included, with the original length."""
        return self.kind == "longrope" and end > self.original_context_length


def frequencies(dim: int, base: float) -> torch.Tensor:
    """(dim/2,) float64 θ_i = base^(-2i/dim)."""
    return base ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)


def dynamic_base(base: float, dim: int, scaling: Scaling, context_length: int, end: int) -> float:
    """Dynamic NTK: past context_length the base grows with the call's end (its last position + 1).

    With dim = 2 the one frequency is base^0 = 1 whatever the base, so the base stays.
    """
    if end <= context_length or dim <= 2:
        return base
    stretch = scaling.factor * end / context_length - (scaling.factor - 1)
    return base * stretch ** (dim / (dim - 2))


def llama3_frequencies(theta: torch.Tensor, scaling: Scaling) -> torch.Tensor:
    """Llama 3.1: wavelengths shorter than L/high_freq_factor kept, longer than L/low_freq_factor
    divided by factor, a linear blend in 1/wavelength between (L: the original context length)."""
    length, low, high = scaling.original_context_length, scaling.low_freq_factor, scaling.high_freq_factor
    wavelength = 2 * math.pi / theta
    smooth = (length / wavelength - low) / (high - low)
    blended = (1 - smooth) * theta / scaling.factor + smooth * theta
    scaled = torch.where(wavelength > length / low, theta / scaling.factor, theta)
    medium = (wavelength >= length / high) & (wavelength <= length / low)
    return torch.where(medium, blended, scaled)


def yarn_frequencies(theta: torch.Tensor, dim: int, base: float, scaling: Scaling) -> torch.Tensor:
    """YaRN's NTK-by-parts: pairs that turn more than beta_fast times over the original context keep θ,
    those that turn fewer than beta_slow times take θ/factor, a linear ramp over the pair index between."""
    def pair_of(turns: float) -> float:  # the (fractional) pair index that turns `turns` times over the context
        return dim * math.log(scaling.original_context_length / (turns * 2 * math.pi)) / (2 * math.log(base))

    low, high = pair_of(scaling.beta_fast), pair_of(scaling.beta_slow)
    if scaling.truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    high = high + 0.001 if low == high else high  # transformers' guard against a zero-width ramp
    ramp = ((torch.arange(dim // 2, dtype=torch.float64) - low) / (high - low)).clamp(0, 1)
    return theta / scaling.factor * ramp + theta * (1 - ramp)


def longrope_frequencies(theta: torch.Tensor, scaling: Scaling, end: int) -> torch.Tensor:
    """LongRoPE (Phi-3.5): θ_i / factor_i, the long factors for a call ending past the original length."""
    factors = scaling.long_factor if scaling.long(end) else scaling.short_factor
    return theta / torch.tensor(factors, dtype=torch.float64)


def scaled_frequencies(dim: int, base: float, scaling: Scaling, context_length: int, end: int) -> torch.Tensor:
    """(dim/2,) float64 frequencies of a call whose last position is end - 1 (dynamic and longrope look at end)."""
    if scaling.kind == "longrope":
        return longrope_frequencies(frequencies(dim, base), scaling, end)
    if scaling.kind == "dynamic":
        return frequencies(dim, dynamic_base(base, dim, scaling, context_length, end))
    theta = frequencies(dim, base)
    if scaling.kind == "linear":
        return theta / scaling.factor
    if scaling.kind == "llama3":
        return llama3_frequencies(theta, scaling)
    if scaling.kind == "yarn":
        return yarn_frequencies(theta, dim, base, scaling)
    return theta


def angles(theta: torch.Tensor, n_positions: int, start: int = 0) -> torch.Tensor:
    """(N, dim/2) float64 angles pos·θ_i for positions start..start+N-1."""
    positions = torch.arange(start, start + n_positions, dtype=torch.float64)
    return positions[:, None] * theta[None, :]


def rotary_angles(n_positions: int, head_dim: int, *, base: float = 10000.0, start: int = 0) -> torch.Tensor:
    """(N, hs/2) float64 angles pos·θ_i with θ_i = base^(-2i/hs): unscaled RoPE."""
    return angles(frequencies(head_dim, base), n_positions, start)


def full_width(per_pair: torch.Tensor, layout: str) -> torch.Tensor:
    """(N, hs/2) values, one per feature pair -> (N, hs), one per feature, in the layout's pairing."""
    if layout == "half":  # pair i = features (i, i + hs/2), Hugging Face's rotate_half layout
        return torch.cat((per_pair, per_pair), dim=-1)  # (N, hs)
    return per_pair.repeat_interleave(2, dim=-1)  # pair i = features (2i, 2i+1): (N, hs)


def quarter_turn(x: torch.Tensor, layout: str) -> torch.Tensor:
    """Each feature pair (a, b) of x (..., N, hs) -> (-b, a): what the sine term multiplies."""
    if layout == "half":
        x1, x2 = x.chunk(2, dim=-1)  # (..., N, hs/2) each
        return torch.cat((-x2, x1), dim=-1)  # (..., N, hs)
    x1, x2 = x[..., 0::2], x[..., 1::2]  # (..., N, hs/2) each
    return torch.stack((-x2, x1), dim=-1).flatten(-2)  # (..., N, hs)


def turn(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layout: str) -> torch.Tensor:
    """x (..., N, hs) turned by full-width cos/sin (N, hs).

    x·cos leads, so the result keeps x's memory layout: q and k arrive as transposed
    views of the qkv projection, and SDPA's output then goes back to (B, N, d) without a copy.
    """
    return x * cos + quarter_turn(x, layout) * sin


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layout: str) -> torch.Tensor:
    """Turn each feature pair of x (..., N, hs) by the angles whose cos/sin are (N, hs/2)."""
    return turn(x, full_width(cos, layout), full_width(sin, layout), layout)


class RotaryPositions(PositionalEncoding):
    """Rotates q and k so that q_m·k_n depends on m - n only; works at any position.

    With ``scaling`` the frequencies are stretched (see ``Scaling``) and yarn multiplies cos and sin by
    its attention factor, so rotation scales lengths by ``attention_factor``. Dynamic NTK computes each
    call's frequencies from where that call ends (``length_dependent``): scores depend on offsets only
    within one call, and the keys a KV cache keeps were turned with the frequencies of their own step, as
    in transformers' cached decoding; uncached, every position of a call uses that call's frequencies,
    as a freshly loaded transformers model does (transformers then keeps the longest call's frequencies
    until a call within max_position_embeddings resets them; blockspec follows each call's own end).
    LongRoPE too picks its set per call (``length_dependent``): a call ending at or before the original length
    takes the short factors, one ending past it the long ones, both sets' tables kept, so no call recomputes.
    """

    rotates = True

    def __init__(self, head_dim: int, context_length: int, *, base: float = 10000.0, layout: str = "half",
                 fraction: float = 1.0, scaling: Scaling = Scaling()) -> None:
        super().__init__(max_positions=None)
        self.head_dim, self.base, self.layout = head_dim, base, layout
        self.rotary_dim = rotary_width(head_dim, fraction)  # the first rotary_dim features of each head turn
        self.scaling, self.context_length = scaling, context_length
        self.attention_factor = scaling.magnitude(context_length)
        self.length_dependent = scaling.kind in ("dynamic", "longrope")
        # dynamic NTK's frequencies follow each call's end, which a tensor start would make per row: row by row
        self.tensor_positions = not self.length_dependent
        self.theta = scaled_frequencies(self.rotary_dim, base, scaling, context_length, context_length)  # float64
        cos, sin = self._full_tables(context_length)
        self.register_buffer("cos_full", cos, persistent=False)  # (context_length, rd)
        self.register_buffer("sin_full", sin, persistent=False)  # (context_length, rd)
        # a call ending at or before switch_length takes the table's frequencies; past it, others (dynamic, longrope)
        self.switch_length = scaling.original_context_length if scaling.kind == "longrope" else context_length
        # longrope: generation that passes L0 with a cache of at most L0 positions recomputes the cache, so the
        # keys the short factors turned are turned by the long ones, as transformers' Phi-3 generate does
        self.recompute_cache_at = self.switch_length if scaling.kind == "longrope" else None
        short = self.switch_length if scaling.kind == "longrope" and context_length > self.switch_length else 0
        cos, sin = self._full_tables(short)  # longrope's short set, for calls ending within L0; else empty
        self.register_buffer("cos_short", cos, persistent=False)  # (short, rd)
        self.register_buffer("sin_short", sin, persistent=False)  # (short, rd)

    def frequencies(self, end: int) -> torch.Tensor:
        """(rd/2,) float64 θ_i for a call whose last position is end - 1."""
        if self.scaling.kind == "longrope" or (self.length_dependent and end > self.context_length):
            return scaled_frequencies(self.rotary_dim, self.base, self.scaling, self.context_length, end)
        return self.theta

    def _full_tables(self, n_positions: int, start: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """float32 cos and sin (N, rd), times the attention factor, computed in float64."""
        turned = angles(self.frequencies(start + n_positions), n_positions, start)  # (N, rd/2)
        wide = full_width(turned, self.layout)  # (N, rd)
        scale = self.attention_factor
        return (wide.cos() * scale).to(torch.float32), (wide.sin() * scale).to(torch.float32)

    def rotate(self, q: torch.Tensor, k: torch.Tensor, start: Start = 0) -> tuple[torch.Tensor, torch.Tensor]:
        if isinstance(start, torch.Tensor):
            cos, sin = self.gathered(positions(start, q.shape[-2]))  # (N, rd) or (B, N, rd)
            if cos.dim() == 3:
                cos, sin = cos[:, None], sin[:, None]  # (B, N, rd) -> (B, 1, N, rd): every head alike
        else:
            cos, sin = self.full_tables(q.shape[-2], start)
        cos, sin = cos.to(q.dtype), sin.to(q.dtype)
        if self.rotary_dim == self.head_dim:
            return turn(q, cos, sin, self.layout), turn(k, cos, sin, self.layout)
        return self._turn_part(q, cos, sin), self._turn_part(k, cos, sin)

    def _turn_part(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """Partial rotation (GPT-NeoX, Phi): the first rotary_dim features of x (..., N, hs) turn, the rest pass."""
        turned, kept = x[..., :self.rotary_dim], x[..., self.rotary_dim:]
        return torch.cat((turn(turned, cos, sin, self.layout), kept), dim=-1)  # (..., N, hs)

    def full_tables(self, n_positions: int, start: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin (N, rd) for positions start..start+N-1; past the cached table, computed on demand."""
        end = start + n_positions
        if 0 < end <= self.cos_short.shape[0]:  # longrope, within its original length: the short set's rows
            return self.cos_short[start:end], self.sin_short[start:end]
        if end <= self.cos_full.shape[0]:
            return self.cos_full[start:end], self.sin_full[start:end]
        cos, sin = self._full_tables(n_positions, start)
        return cos.to(self.cos_full.device), sin.to(self.sin_full.device)

    def gathered(self, at: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Positions (N,) or (B, N) -> cos and sin (..., rd): the tables' rows, computed past their end.

        No host sync (a compiled step stays whole): both are formed and the position picks one."""
        last = self.cos_full.shape[0] - 1
        inside = (at <= last)[..., None]
        wide = full_width(at.double()[..., None] * self.theta.to(at.device), self.layout)  # (..., rd)
        scale = self.attention_factor
        cos = torch.where(inside, self.cos_full[at.clamp(max=last)], (wide.cos() * scale).to(torch.float32))
        sin = torch.where(inside, self.sin_full[at.clamp(max=last)], (wide.sin() * scale).to(torch.float32))
        return cos, sin

    def tables(self, n_positions: int, start: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin (N, rd/2), one per rotated feature pair, for positions start..start+N-1."""
        cos, sin = self.full_tables(n_positions, start)
        pairs = slice(0, self.rotary_dim // 2) if self.layout == "half" else slice(0, None, 2)
        return cos[:, pairs], sin[:, pairs]
