"""Positional encoders: xPos and a zero-initialised bucketed bias (correct), and broken copies of
rope, sinusoidal, learned, ALiBi and the bucketed bias."""

from __future__ import annotations

import dataclasses
import math

import blockspec_extras
import blockspec_positional
import torch
from attrs import field, frozen
from blockspec_extras import ALiBiConfig
from blockspec_extras.alibi import ALiBi
from blockspec_positional import LearnedConfig, NoneConfig, RopeConfig, SinusoidalConfig
from blockspec_positional.learned import LearnedPositions
from blockspec_positional.rope import RotaryPositions, Scaling, frequencies, full_width, rotary_angles, turn
from blockspec_positional.sinusoidal import SinusoidalPositions
from torch import nn

from blockspec.plugin import BuildContext, PositionalEncoding, at_least, greater_than, positive
from tests.verify.corpus import CACHE_POSITIONS, DTYPES, Corpus, declared

CORPUS = Corpus()
ROPE = declared(blockspec_positional, "positional", "rope")
SINUSOIDAL = declared(blockspec_positional, "positional", "sinusoidal")
LEARNED = declared(blockspec_positional, "positional", "learned")
ALIBI = declared(blockspec_extras, "positional", "alibi")
NONE = declared(blockspec_positional, "positional", "none")


# --- correct: xPos, rotary but not norm-preserving -------------------------------------------------

@frozen(kw_only=True)
class XPosConfig:
    """xPos (Sun et al. 2022): rope, with q scaled by ζ^(m/γ) and k by ζ^(-n/γ) per feature pair."""

    base: float = field(default=10000.0, validator=greater_than(1.0))
    scale_base: float = field(default=512.0, validator=greater_than(0.0))


class XPos(RotaryPositions):
    """Rotates like rope, then scales: scores keep depending on m - n only, lengths do not survive."""

    def __init__(self, head_dim: int, context_length: int, *, base: float, scale_base: float) -> None:
        super().__init__(head_dim, context_length, base=base)
        self.scale_base = scale_base
        zeta = (torch.arange(0, head_dim, 2, dtype=torch.float64) + 0.4 * head_dim) / (1.4 * head_dim)
        self.register_buffer("zeta", zeta, persistent=False)  # (hs/2,)

    def rotate(self, q: torch.Tensor, k: torch.Tensor, start: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        q, k = super().rotate(q, k, start)
        scale = self.scales(q.shape[-2], start).to(q.dtype)  # (N, hs)
        return q * scale, k / scale

    def scales(self, n_positions: int, start: int) -> torch.Tensor:
        """ζ^(position/γ) per feature, (N, hs), computed in float64."""
        positions = torch.arange(start, start + n_positions, dtype=torch.float64, device=self.zeta.device)
        per_pair = self.zeta.double()[None, :] ** (positions[:, None] / self.scale_base)  # (N, hs/2)
        return full_width(per_pair, self.layout)  # (N, hs)


def build_xpos(config: XPosConfig, ctx: BuildContext) -> XPos:
    return XPos(ctx.model.head_dim, ctx.model.context_length, base=config.base, scale_base=config.scale_base)


CORPUS.correct("positional", "xpos", XPosConfig, build_xpos, promises=("rotary", "relative", "unbounded"),
               why="rotates q and k but scales them: relative, not norm-preserving")


# --- correct: a bucketed relative bias whose table starts at zero ----------------------------------

@frozen(kw_only=True)
class BucketedBiasConfig:
    """T5's relative bias, causal: log-spaced offset buckets, one learned bias per bucket and head, zero at init."""

    n_buckets: int = field(default=32, validator=at_least(2))
    max_distance: int = field(default=128, validator=positive)


class BucketedBias(PositionalEncoding):
    """Query i sits at key position i + n_k - n_q; the bias is table[bucket(i - j)], zero until trained."""

    biases = True

    def __init__(self, n_heads: int, n_buckets: int, max_distance: int) -> None:
        super().__init__(max_positions=None)
        self.n_buckets, self.max_distance = n_buckets, max(max_distance, n_buckets)
        self.table = nn.Embedding(n_buckets, n_heads)
        nn.init.zeros_(self.table.weight)

    def score_bias(self, n_q: int, n_k: int, start: int = 0) -> torch.Tensor:
        queries, keys = self.positions(n_q, n_k)
        offsets = queries[:, None] - keys[None, :]  # (n_q, n_k): i - j
        return self.table(self.bucket(offsets)).permute(2, 0, 1)  # (n_q, n_k, h) -> (h, n_q, n_k)

    def positions(self, n_q: int, n_k: int) -> tuple[torch.Tensor, torch.Tensor]:
        device = self.table.weight.device
        return torch.arange(n_k - n_q, n_k, device=device), torch.arange(n_k, device=device)

    def bucket(self, offsets: torch.Tensor) -> torch.Tensor:
        """Offsets below n_buckets/2 get their own bucket; longer ones share log-spaced buckets."""
        near = self.n_buckets // 2
        n = offsets.clamp_min(0)
        spread = torch.log(n.clamp_min(near).double() / near) / math.log(self.max_distance / near)
        far = (near + (spread * (self.n_buckets - near)).long()).clamp(max=self.n_buckets - 1)
        return torch.where(n < near, n, far)


def build_bucketed(config: BucketedBiasConfig, ctx: BuildContext) -> BucketedBias:
    return BucketedBias(ctx.model.n_heads, config.n_buckets, config.max_distance)


BUCKETED = ("score_bias", "relative", "unbounded")
CORPUS.correct("positional", "bucketed_bias", BucketedBiasConfig, build_bucketed, promises=BUCKETED,
               why="a relative bias table that starts at zero")


# --- mutants of rope --------------------------------------------------------------------------------

class RopePastContext(RotaryPositions):
    def full_tables(self, n_positions: int, start: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        end = start + n_positions
        if end <= self.cos_full.shape[0]:
            return self.cos_full[start:end], self.sin_full[start:end]
        cos, sin = self._full_tables(n_positions, start + 1)  # BUG: past the table, positions start + 1..
        return cos.to(self.cos_full.device), sin.to(self.sin_full.device)


class RopeOtherLayout(RotaryPositions):
    def _full_tables(self, n_positions: int, start: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        other = "interleaved" if self.layout == "half" else "half"  # BUG: tables paired unlike turn()
        angles = full_width(rotary_angles(n_positions, self.rotary_dim, base=self.base, start=start), other)
        return angles.cos().to(torch.float32), angles.sin().to(torch.float32)


class RopeUpcast(RotaryPositions):
    def rotate(self, q: torch.Tensor, k: torch.Tensor, start: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        cos, sin = self.full_tables(q.shape[-2], start)  # BUG: never cast to q's dtype (float32 past the table)
        if self.rotary_dim == self.head_dim:
            return turn(q, cos, sin, self.layout), turn(k, cos, sin, self.layout)
        return self._turn_part(q, cos, sin), self._turn_part(k, cos, sin)


class RopeTailTurns(RotaryPositions):
    def _turn_part(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        kept, turned = x[..., :-self.rotary_dim], x[..., -self.rotary_dim:]  # BUG: the last rotary_dim turn
        return torch.cat((kept, turn(turned, cos, sin, self.layout)), dim=-1)  # (..., N, hs)


def rope_as(cls: type) -> object:
    """build_rope, building the mutant's class."""

    def build(config: RopeConfig, ctx: BuildContext) -> RotaryPositions:
        if ctx.model.head_dim % 2:
            raise ValueError(f"rope needs an even head_dim, found {ctx.model.head_dim}")
        return cls(ctx.model.head_dim, ctx.model.context_length, base=config.base, layout=config.layout,
                   fraction=config.fraction)

    return build


CORPUS.mutant("positional", "rope_past_context", RopeConfig, rope_as(RopePastContext), like=ROPE, catches=CACHE_POSITIONS,
              bug="past the cached table, the angles are computed for start + 1")
CORPUS.mutant("positional", "rope_other_layout", RopeConfig, rope_as(RopeOtherLayout), like=ROPE,
              catches="rotation_norms", bug="cos/sin tables paired in one layout, features turned in the other")
CORPUS.mutant("positional", "rope_tail_turns", RopeConfig, rope_as(RopeTailTurns), like=ROPE,
              catches="partial_rotary", bug="with fraction < 1 the last rotary_dim features turn, not the first")
CORPUS.mutant("positional", "rope_upcast", RopeConfig, rope_as(RopeUpcast), like=ROPE, catches=DTYPES,
              bug="cos/sin never cast to q's dtype: past the cached table, half-precision q comes back float32")
CORPUS.mutant("positional", "rope_scaling_dropped", RopeConfig, rope_as(RotaryPositions), like=ROPE,
              catches="rope_frequencies", bug="the scaling and its options are never passed to the encoder")


# --- mutants of rope's longrope scaling (Phi-3.5): per-pair divisors, short set within the original length ------

class LongropeSwitchAtOriginal(Scaling):
    def long(self, end: int) -> bool:
        return self.kind == "longrope" and end >= self.original_context_length  # BUG: >=, transformers has >


class LongropeUnscaled(Scaling):
    def magnitude(self, context_length: int = 1) -> float:
        if self.kind == "longrope" and self.attention_factor is None:
            return 1.0  # BUG: the default attention factor sqrt(1 + ln s / ln L0) derived for yarn only
        return super().magnitude(context_length)


class LongropeMultiplies(RotaryPositions):
    def frequencies(self, end: int) -> torch.Tensor:
        if self.scaling.kind != "longrope":
            return super().frequencies(end)
        factors = self.scaling.long_factor if self.scaling.long(end) else self.scaling.short_factor
        return frequencies(self.rotary_dim, self.base) * torch.tensor(factors, dtype=torch.float64)  # BUG: * not /


def longrope_as(cls: type = RotaryPositions, scaling: type = Scaling) -> object:
    """build_rope (its checks and options), then the mutant's class or scaling in place of the real one."""

    def build(config: RopeConfig, ctx: BuildContext) -> RotaryPositions:
        built = blockspec_positional.build_rope(config, ctx)
        return cls(ctx.model.head_dim, ctx.model.context_length, base=config.base, layout=config.layout,
                   fraction=config.fraction, scaling=scaling(**dataclasses.asdict(built.scaling)))

    return build


CORPUS.mutant("positional", "longrope_switch_at_original", RopeConfig, longrope_as(scaling=LongropeSwitchAtOriginal),
              like=ROPE, catches="rope_frequencies",
              bug="longrope's long factors from a call ending at the original length, so its short table holds them")
CORPUS.mutant("positional", "longrope_unscaled", RopeConfig, longrope_as(scaling=LongropeUnscaled), like=ROPE,
              catches="rope_frequencies", bug="longrope's default attention factor left at 1 past the original length")
CORPUS.mutant("positional", "longrope_multiplies", RopeConfig, longrope_as(LongropeMultiplies), like=ROPE,
              catches="rope_frequencies", bug="longrope's θ_i times its factor instead of divided by it")


# --- mutants of sinusoidal and learned ---------------------------------------------------------------

class SinusoidalIgnoresStart(SinusoidalPositions):
    def embed(self, x: torch.Tensor, start: int = 0) -> torch.Tensor:
        return x + self.encodings(x.shape[-2]).to(x.dtype)  # BUG: start dropped, every chunk from position 0


def per_feature_table(n_positions: int, d_model: int, *, base: float = 10000.0, start: int = 0) -> torch.Tensor:
    positions = torch.arange(start, start + n_positions, dtype=torch.float64)
    angles = positions[:, None] * base ** (-torch.arange(d_model, dtype=torch.float64) / d_model)  # (N, d)
    table = torch.empty(n_positions, d_model, dtype=torch.float64)
    table[:, 0::2] = angles[:, 0::2].sin()  # BUG: one frequency per feature, so a pair's sin and cos differ
    table[:, 1::2] = angles[:, 1::2].cos()
    return table.to(torch.float32)


class SinusoidalPerFeature(SinusoidalPositions):
    def __init__(self, context_length: int, d_model: int, *, base: float = 10000.0) -> None:
        super().__init__(context_length, d_model, base=base)
        self.table = per_feature_table(context_length, d_model, base=base)

    def encodings(self, n_positions: int, start: int = 0) -> torch.Tensor:
        if start + n_positions <= self.table.shape[0]:
            return self.table[start : start + n_positions]
        return per_feature_table(n_positions, self.d_model, base=self.base, start=start).to(self.table.device)


def build_sinusoidal_as(cls: type) -> object:
    def build(config: SinusoidalConfig, ctx: BuildContext) -> SinusoidalPositions:
        return cls(ctx.model.context_length, ctx.model.d_model, base=config.base)

    return build


class LearnedOneBased(LearnedPositions):
    def embed(self, x: torch.Tensor, start: int = 0) -> torch.Tensor:
        first = start + 1  # BUG: positions counted from 1 (OPT's offset) in a table without the extra row
        return x + self.table.weight[first : first + x.shape[-2]]  # (B, N, d) + (N, d)


class LearnedNoLimit(LearnedPositions):
    def __init__(self, context_length: int, d_model: int) -> None:
        super().__init__(context_length, d_model)
        self.max_positions = None  # BUG: says any position works, so nothing refuses one past the table


def learned_as(cls: type) -> object:
    def build(config: LearnedConfig, ctx: BuildContext) -> LearnedPositions:
        return cls(ctx.model.context_length, ctx.model.d_model)

    return build


CORPUS.mutant("positional", "sinusoidal_ignores_start", SinusoidalConfig,
              build_sinusoidal_as(SinusoidalIgnoresStart), like=SINUSOIDAL, catches=CACHE_POSITIONS,
              bug="embed() ignores start: a cached continuation is encoded from position 0 again")
CORPUS.mutant("positional", "sinusoidal_per_feature", SinusoidalConfig, build_sinusoidal_as(SinusoidalPerFeature),
              like=SINUSOIDAL, catches="relative", bug="a frequency per feature instead of per (sin, cos) pair")
CORPUS.mutant("positional", "learned_one_based", LearnedConfig, learned_as(LearnedOneBased), like=LEARNED,
              catches="contract", bug="positions offset by one in a table of context_length rows")
CORPUS.mutant("positional", "learned_no_limit", LearnedConfig, learned_as(LearnedNoLimit), like=LEARNED,
              catches="context_limit", bug="max_positions None on a bounded table: no ContextLengthError past it")


# --- mutants of none (NoPE) ---------------------------------------------------------------------------------

def none_as_huge_base_rope(config: NoneConfig, ctx: BuildContext) -> RotaryPositions:
    return RotaryPositions(ctx.model.head_dim, ctx.model.context_length, base=1e12)  # BUG: pair 0 turns anyway


def none_keeps_alibi(config: NoneConfig, ctx: BuildContext) -> ALiBi:
    return ALiBi(ctx.model.n_heads)  # BUG: the layer template's ALiBi left in the RoPE-free layers


def none_adds_sinusoids(config: NoneConfig, ctx: BuildContext) -> SinusoidalPositions:
    return SinusoidalPositions(ctx.model.context_length, ctx.model.d_model)  # BUG: the model-wide encoder again


CORPUS.mutant("positional", "none_as_huge_base_rope", NoneConfig, none_as_huge_base_rope, like=NONE,
              catches="position_free", bug="NoPE as RoPE with base 1e12: the first feature pair still turns by "
                                           "one radian per position")
CORPUS.mutant("positional", "none_keeps_alibi", NoneConfig, none_keeps_alibi, like=NONE, catches="position_free",
              bug="the RoPE-free layer keeps an ALiBi score bias")
CORPUS.mutant("positional", "none_adds_sinusoids", NoneConfig, none_adds_sinusoids, like=NONE,
              catches="position_free", bug="the RoPE-free layer adds the sinusoids to its input")


# --- mutants of ALiBi and the bucketed bias ------------------------------------------------------------

class AlibiClamped(ALiBi):
    """A copy that looks its distances up in a table precomputed for 64 positions."""

    TABLE = 64

    def __init__(self, n_heads: int) -> None:
        super().__init__(n_heads)
        positions = torch.arange(self.TABLE, dtype=torch.float32)
        self.register_buffer("distances", positions[None, :] - positions[:, None], persistent=False)  # (64, 64)

    def score_bias(self, n_q: int, n_k: int, start: int = 0) -> torch.Tensor:
        device = self.slopes.device
        queries = torch.arange(start, start + n_q, device=device)  # queries at start.., the keys end with them
        keys = torch.arange(start + n_q - n_k, start + n_q, device=device)
        last = self.TABLE - 1  # BUG: positions past the table are clamped, so distances there shrink
        distance = self.distances[queries.clamp(max=last)][:, keys.clamp(max=last)]  # (n_q, n_k): j - i
        return self.slopes[:, None, None] * distance[None]  # (h, n_q, n_k)


class AlibiSquare(ALiBi):
    def score_bias(self, n_q: int, n_k: int, start: int = 0) -> torch.Tensor:
        positions = torch.arange(n_q, device=self.slopes.device)  # BUG: assumes as many keys as queries
        distance = (positions[None, :] - positions[:, None]).to(self.slopes.dtype)  # (n_q, n_q)
        return self.slopes[:, None, None] * distance[None]


def build_alibi_as(cls: type) -> object:
    def build(config: ALiBiConfig, ctx: BuildContext) -> ALiBi:
        return cls(ctx.model.n_heads)

    return build


class BucketedSum(BucketedBias):
    def score_bias(self, n_q: int, n_k: int, start: int = 0) -> torch.Tensor:
        queries, keys = self.positions(n_q, n_k)
        offsets = queries[:, None] + keys[None, :]  # BUG: i + j where i - j belongs
        return self.table(self.bucket(offsets)).permute(2, 0, 1)  # (h, n_q, n_k)


def build_bucketed_sum(config: BucketedBiasConfig, ctx: BuildContext) -> BucketedBias:
    return BucketedSum(ctx.model.n_heads, config.n_buckets, config.max_distance)


CORPUS.mutant("positional", "alibi_clamped_64", ALiBiConfig, build_alibi_as(AlibiClamped), like=ALIBI,
              catches="relative", bug="absolute positions clamped at 63 instead of the distance")
CORPUS.mutant("positional", "alibi_square", ALiBiConfig, build_alibi_as(AlibiSquare), like=ALIBI, catches=CACHE_POSITIONS,
              bug="score_bias assumes n_q == n_k: wrong shape for a cached query")
CORPUS.mutant("positional", "bucketed_sum", BucketedBiasConfig, build_bucketed_sum, like=BUCKETED,
              catches="relative", bug="buckets i + j instead of i - j: invisible while the table is zero")


# --- NTK-aware scaled RoPE (issue 27): a scaling the kit has no formula for, declared by the component ---------

@frozen(kw_only=True)
class NTKRopeConfig:
    """NTK-aware RoPE: the base stretched to base·factor^(d/(d-2)), so the longest wave covers factor times
    the context while the shortest barely moves."""

    base: float = field(default=10000.0, validator=greater_than(1.0))
    factor: float = field(default=4.0, validator=at_least(1.0))


NTK = ("rotary", "norm_preserving", "relative", "unbounded", "declared_frequencies")


class NTKRope(PositionalEncoding):
    """Rotates each (i, i + hs/2) feature pair by position·θ_i; ``frequencies`` declares θ_i by the formula."""

    rotates = True

    def __init__(self, head_dim: int, *, base: float, factor: float) -> None:
        super().__init__(max_positions=None)
        self.head_dim, self.base, self.factor, self.layout = head_dim, base, factor, "half"
        self.theta = self.table_frequencies()  # (hs/2,) float64, kept out of .to(dtype)

    def stretched_base(self) -> float:
        d = self.head_dim
        return self.base * self.factor ** (d / (d - 2)) if d > 2 else self.base  # d = 2: the one θ is 1

    def table_frequencies(self) -> torch.Tensor:
        """The θ_i the rotation uses, computed once."""
        return self.stretched_base() ** (-torch.arange(0, self.head_dim, 2, dtype=torch.float64) / self.head_dim)

    def frequencies(self, end: int) -> torch.Tensor:
        """θ_i = (base·factor^(d/(d-2)))^(-2i/d), whatever the call's end (the scaling is static)."""
        d = self.head_dim
        stretched = self.base * self.factor ** (d / (d - 2)) if d > 2 else self.base
        return stretched ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)

    def rotate(self, q: torch.Tensor, k: torch.Tensor, start: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        positions = torch.arange(start, start + q.shape[-2], dtype=torch.float64)
        turned = positions[:, None] * self.theta[None, :]  # (N, hs/2)
        cos, sin = (full_width(t, "half").to(device=q.device, dtype=q.dtype) for t in (turned.cos(), turned.sin()))
        return turn(q, cos, sin, "half"), turn(k, cos, sin, "half")  # (N, hs) tables over (..., N, hs)


class NTKRopeWrongExponent(NTKRope):
    def stretched_base(self) -> float:
        d = self.head_dim
        return self.base * self.factor ** (d / (d - 1))  # BUG: the exponent is d/(d-2)


def ntk_as(cls: type) -> object:
    def build(config: NTKRopeConfig, ctx: BuildContext) -> NTKRope:
        if ctx.model.head_dim % 2:
            raise ValueError(f"ntk rope needs an even head_dim, found {ctx.model.head_dim}")
        return cls(ctx.model.head_dim, base=config.base, factor=config.factor)

    return build


CORPUS.correct("positional", "ntk_rope", NTKRopeConfig, ntk_as(NTKRope), promises=NTK,
               why="NTK-aware RoPE: a scaling the kit knows no formula for, its frequencies declared")
CORPUS.mutant("positional", "ntk_rope_wrong_exponent", NTKRopeConfig, ntk_as(NTKRopeWrongExponent), like=NTK,
              catches="declared_frequencies", bug="the base stretched by factor^(d/(d-1)), not factor^(d/(d-2))")
