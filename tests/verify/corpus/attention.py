"""Attention: the core's causal attention with its mask as a method (correct), and broken copies."""

from __future__ import annotations

import blockspec_attention
import torch
import torch.nn.functional as F
from blockspec_attention import MLAConfig, one_latent
from blockspec_attention.mla import LatentAttention

from blockspec.assembly import builtin
from blockspec.assembly.builtin import CausalAttentionConfig
from blockspec.modules.attention import CausalSelfAttention, causal_mask
from blockspec.plugin import BuildContext, LayerCache, PositionalEncoding, rotate_at
from tests.verify.corpus import CACHE_ATTENTION, CACHE_PADDING, RELATIVE_ATTENTION, Corpus, declared

CORPUS = Corpus()
CAUSAL = declared(builtin, "attention", "causal")
MLA = declared(blockspec_attention, "attention", "mla")
UNSUNK = tuple(p for p in CAUSAL if p not in ("sinks", "sink_option"))  # copies whose attend() has no sinks


def attention_as(cls: type) -> object:
    """build_causal_attention, building the mutant's class."""

    def build(config: CausalAttentionConfig, ctx: BuildContext) -> CausalSelfAttention:
        m = ctx.model
        return cls(d_model=m.d_model, n_heads=m.n_heads, n_kv_heads=m.kv_heads, bias=m.bias, dropout=m.dropout,
                   head_dim=m.head_dim, qk_norm=config.qk_norm, qk_norm_eps=config.qk_norm_eps,
                   qk_norm_offset=config.qk_norm_offset,
                   logit_softcap=config.logit_softcap, sliding_window=config.sliding_window,
                   query_scale=config.query_scale, qkv_bias=config.qkv_bias, out_bias=config.out_bias,
                   sinks=config.sinks)

    return build


# --- correct: every score masked through one method --------------------------------------------------

class HandMasked(CausalSelfAttention):
    """The core attention on the explicit-mask path only, its mask a method the mask mutants override."""

    def mask(self, n_q: int, n_k: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
        return causal_mask(n_q, n_k, device, dtype, window=self.sliding_window)  # (n_q, n_k)

    def padded(self, mask: torch.Tensor, keys: torch.Tensor | None) -> torch.Tensor:
        """The mask (n_q, n_k) with a ragged batch's padding keys hidden: (B, 1, n_q, n_k)."""
        return mask if keys is None else mask.masked_fill(~keys, float("-inf"))

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor | None,
               keys: torch.Tensor | None = None) -> torch.Tensor:
        dropout = self.dropout if self.training else 0.0
        if self.logit_softcap is not None:
            return F.dropout(self.weights(q, k, bias, keys), p=dropout) @ self._repeat_kv(v)  # (B, h, N_q, hs)
        mask = self.padded(self.mask(q.shape[-2], k.shape[-2], q.device, q.dtype), keys)
        mask = mask if bias is None else bias.to(q.dtype) + mask
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout, scale=self.query_scale,
                                              enable_gqa=self.n_kv_heads != self.n_heads)

    def weights(self, q: torch.Tensor, k: torch.Tensor, bias: torch.Tensor | None = None,
                keys: torch.Tensor | None = None) -> torch.Tensor:
        scores = self.scores(q, k, bias) + self.padded(self.mask(q.shape[-2], k.shape[-2], q.device, q.dtype), keys)
        return scores.softmax(dim=-1)  # (B, h, N_q, N_k)


class WindowOffByOne(HandMasked):
    def mask(self, n_q: int, n_k: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
        allowed = torch.ones(n_q, n_k, dtype=torch.bool, device=device).tril(diagonal=n_k - n_q)
        if self.sliding_window is not None:
            allowed = allowed.triu(diagonal=n_k - n_q - self.sliding_window)  # BUG: w + 1 keys, not w
        return torch.zeros(n_q, n_k, dtype=dtype, device=device).masked_fill(~allowed, float("-inf"))


class TopLeftMask(HandMasked):
    def mask(self, n_q: int, n_k: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
        allowed = torch.ones(n_q, n_k, dtype=torch.bool, device=device).tril()  # BUG: top-left, as if n_q == n_k
        if self.sliding_window is not None:
            allowed = allowed.triu(diagonal=n_k - n_q - self.sliding_window + 1)
        return torch.zeros(n_q, n_k, dtype=dtype, device=device).masked_fill(~allowed, float("-inf"))


CORPUS.correct("attention", "causal_by_hand", CausalAttentionConfig, attention_as(HandMasked), promises=UNSUNK,
               why="the core attention on its explicit-mask path: the mask mutants change one line of it")
CORPUS.mutant("attention", "window_off_by_one", CausalAttentionConfig, attention_as(WindowOffByOne), like=UNSUNK,
              catches="sliding_window", bug="a sliding window of w lets w + 1 keys through")
CORPUS.mutant("attention", "mask_top_left", CausalAttentionConfig, attention_as(TopLeftMask), like=UNSUNK,
              catches=CACHE_ATTENTION, bug="the causal mask aligned top-left: cached queries miss the newest keys")


# --- mutants of the core attention ---------------------------------------------------------------------

class RotaryV(CausalSelfAttention):
    def project(self, x: torch.Tensor, positional: PositionalEncoding, start: int = 0):
        q, k, v = super().project(x, positional, start)
        if positional.rotates:
            v, _ = positional.rotate(v, v, start)  # BUG: values rotated by position too
        return q, k, v


class RotateFromZero(CausalSelfAttention):
    def project(self, x: torch.Tensor, positional: PositionalEncoding, start: int = 0):
        return super().project(x, positional, 0)  # BUG: start not passed on, every chunk rotated from position 0


class CacheDropsMask(CausalSelfAttention):
    def forward(self, x: torch.Tensor, positional: PositionalEncoding, start: int = 0,
                cache: LayerCache | None = None) -> torch.Tensor:
        if cache is None:
            return super().forward(x, positional, start)
        q, k, v = self.project(x, positional, start)
        k, v = cache.update(k, v, start)  # (B, kv, start+N, hs) each
        y = F.scaled_dot_product_attention(q, k, v, enable_gqa=self.n_kv_heads != self.n_heads,
                                           scale=self.query_scale)  # BUG: no mask with a cache (right for 1 token)
        return self.proj(y.transpose(1, 2).reshape(*x.shape[:2], -1))  # (B, h, N, hs) -> (B, N, h·hs)


class PaddingKeysSeen(HandMasked):
    def padded(self, mask: torch.Tensor, keys: torch.Tensor | None) -> torch.Tensor:
        return mask  # BUG: the cache's key mask ignored, a ragged batch's padding keys attended to


class CapAfterMask(CausalSelfAttention):
    def weights(self, q: torch.Tensor, k: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        mask = causal_mask(q.shape[-2], k.shape[-2], q.device, q.dtype, window=self.sliding_window)
        bias = mask if bias is None else bias + mask  # BUG: masked inside the cap, so -inf becomes -cap
        return self.scores(q, k, bias).softmax(dim=-1)


class QKNormNoSqrt(CausalSelfAttention):
    def normalise_qk(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.qk_norm != "head":
            return super().normalise_qk(q, k)
        return _no_sqrt(self.q_norm, q), _no_sqrt(self.k_norm, k)


def _no_sqrt(norm: torch.nn.RMSNorm, x: torch.Tensor) -> torch.Tensor:
    return x / (x.pow(2).mean(dim=-1, keepdim=True) + norm.eps) * norm.weight  # BUG: the square root is missing


class QKNormNoTranspose(CausalSelfAttention):
    def normalise_qk(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.qk_norm != "all":
            return super().normalise_qk(q, k)
        return _untransposed(self.q_norm, q), _untransposed(self.k_norm, k)


def _untransposed(norm: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    batch, heads, n_tokens, head_dim = x.shape
    joined = x.reshape(batch, n_tokens, heads * head_dim)  # BUG: (B, h, N, hs) reshaped without the transpose
    return norm(joined).view(batch, heads, n_tokens, head_dim)


class OffsetStoredAsOne(CausalSelfAttention):
    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)
        if kwargs.get("qk_norm_offset"):
            with torch.no_grad():
                self.q_norm.weight.fill_(1.0)  # BUG: w of (1 + w) stored as 1, so the fresh scale is 2
                self.k_norm.weight.fill_(1.0)


def build_offset_ignored(config: CausalAttentionConfig, ctx: BuildContext) -> CausalSelfAttention:
    m = ctx.model
    return CausalSelfAttention(d_model=m.d_model, n_heads=m.n_heads, n_kv_heads=m.kv_heads, bias=m.bias,
                               dropout=m.dropout, head_dim=m.head_dim, qk_norm=config.qk_norm,
                               qk_norm_eps=config.qk_norm_eps,  # BUG: qk_norm_offset not passed on
                               logit_softcap=config.logit_softcap, sliding_window=config.sliding_window,
                               query_scale=config.query_scale, qkv_bias=config.qkv_bias, out_bias=config.out_bias)


CORPUS.mutant("attention", "rotary_v", CausalAttentionConfig, attention_as(RotaryV),
              like=CAUSAL, catches=RELATIVE_ATTENTION, bug="the rotary encoder turns v as well as q and k")
CORPUS.mutant("attention", "rotate_from_zero", CausalAttentionConfig, attention_as(RotateFromZero), like=CAUSAL,
              catches=CACHE_ATTENTION, bug="start is not passed to rotate(): a cached chunk is rotated from position 0")
CORPUS.mutant("attention", "cache_drops_mask", CausalAttentionConfig, attention_as(CacheDropsMask), like=CAUSAL,
              catches=CACHE_ATTENTION, bug="no causal mask whenever a cache is passed, right only for one token at a time")
CORPUS.mutant("attention", "padding_keys_seen", CausalAttentionConfig, attention_as(PaddingKeysSeen), like=UNSUNK,
              catches=CACHE_PADDING, bug="a ragged batch's padding keys attended to: the cache's key_mask ignored")
CORPUS.mutant("attention", "cap_after_mask", CausalAttentionConfig, attention_as(CapAfterMask), like=CAUSAL,
              catches="causal", bug="logit_softcap applied after the mask: masked scores become -cap, not -inf")
CORPUS.mutant("attention", "qk_norm_no_sqrt", CausalAttentionConfig, attention_as(QKNormNoSqrt), like=CAUSAL,
              catches="qk_norm", bug="per-head qk norm divides by the mean square, not its root")
CORPUS.mutant("attention", "qk_norm_offset_ones", CausalAttentionConfig, attention_as(OffsetStoredAsOne),
              like=CAUSAL, catches="qk_norm_offset", bug="the (1 + w) q/k norms store w = 1, doubling q and k")
CORPUS.mutant("attention", "qk_norm_offset_ignored", CausalAttentionConfig, build_offset_ignored, like=CAUSAL,
              catches="qk_norm_offset", bug="qk_norm_offset is not passed on: plain w-scaled q/k norms")
CORPUS.mutant("attention", "qk_norm_no_transpose", CausalAttentionConfig, attention_as(QKNormNoTranspose),
              like=CAUSAL, catches="qk_norm", bug="the all-heads qk norm joins (B, h, N, hs) without the transpose")


class SoftcapScaledUncapped(CausalSelfAttention):
    def scores(self, q: torch.Tensor, k: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        if self.query_scale is None:
            return super().scores(q, k, bias)
        scores = q @ self._repeat_kv(k).transpose(-2, -1) * self.query_scale  # (B, h, N, N)
        return scores if bias is None else scores + bias  # BUG: the explicit query_scale path forgets the cap


CORPUS.mutant("attention", "softcap_scaled_uncapped", CausalAttentionConfig, attention_as(SoftcapScaledUncapped),
              like=CAUSAL, catches="logit_softcap", bug="with a query_scale set, the scores are never soft-capped")


# --- attention variants as outside authors write them (issue 27): sinks, a softcap and a window through forward --

SINKS = tuple(p for p in CAUSAL if p != "sink_option")  # these authors' sinks are always on: no option


class SinkAttention(CausalSelfAttention):
    """gpt-oss's attention sinks: one learned logit per head joins every row's softmax and takes no value."""

    def __init__(self, **options) -> None:
        super().__init__(**options)
        self.sinks = torch.nn.Parameter(torch.zeros(self.n_heads))  # (h,): zero, a sink as likely as one key

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor | None,
               keys: torch.Tensor | None = None, slots=None) -> torch.Tensor:
        weights = F.dropout(self.weights(q, k, bias, keys, slots), p=self.dropout if self.training else 0.0)
        return weights @ self._repeat_kv(v)  # (B, h, N_q, N_k) @ (B, h, N_k, hs)

    def weights(self, q: torch.Tensor, k: torch.Tensor, bias: torch.Tensor | None = None,
                keys: torch.Tensor | None = None, slots=None) -> torch.Tensor:
        scores = self.scores(q, k, bias) + self.full_mask(q.shape[-2], k.shape[-2], q, keys, slots)
        sink = self.sink_logits(scores)  # (B, h, N_q, 1)
        return torch.cat([scores, sink], dim=-1).softmax(dim=-1)[..., :-1]  # the sink's column dropped

    def sink_logits(self, scores: torch.Tensor) -> torch.Tensor:
        """Each head's sink logit as a column beside the scores (B, h, N_q, N_k): (B, h, N_q, 1)."""
        return self.sinks.to(scores.dtype).view(1, -1, 1, 1).expand(*scores.shape[:-1], 1)


class SinkTakesValue(SinkAttention):
    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor | None,
               keys: torch.Tensor | None = None, slots=None) -> torch.Tensor:
        weights = self.weights(q, k, bias, keys, slots)  # (B, h, N_q, N_k)
        v = self._repeat_kv(v)
        sink = 1 - weights.sum(-1, keepdim=True)  # the sink's share of each row
        return weights @ v + sink * v[..., :1, :]  # BUG: the sink attends to the first token's value


class SinkAfterSoftmax(SinkAttention):
    def weights(self, q: torch.Tensor, k: torch.Tensor, bias: torch.Tensor | None = None,
                keys: torch.Tensor | None = None, slots=None) -> torch.Tensor:
        scores = self.scores(q, k, bias) + self.full_mask(q.shape[-2], k.shape[-2], q, keys, slots)
        return scores.softmax(dim=-1) / (1 + self.sink_logits(scores).exp())  # BUG: scaled after the softmax


class SinkPerKVHead(SinkAttention):
    def sink_logits(self, scores: torch.Tensor) -> torch.Tensor:
        group = self.n_heads // self.n_kv_heads
        sinks = self.sinks[:self.n_kv_heads].repeat_interleave(group)  # BUG: one sink per kv head, as k and v
        return sinks.to(scores.dtype).view(1, -1, 1, 1).expand(*scores.shape[:-1], 1)


class SoftcapForgottenInForward(CausalSelfAttention):
    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor | None,
               keys: torch.Tensor | None = None, slots=None) -> torch.Tensor:
        mask = self.full_mask(q.shape[-2], k.shape[-2], q, keys, slots)
        mask = mask if bias is None else bias.to(q.dtype) + mask
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=self.query_scale,
                                              enable_gqa=self.n_kv_heads != self.n_heads)  # BUG: fused, uncapped


class WindowOffByOneCached(CausalSelfAttention):
    def full_mask(self, n_q: int, n_k: int, q: torch.Tensor, keys: torch.Tensor | None = None,
                  slots=None) -> torch.Tensor:
        window = self.sliding_window
        if window is not None and n_q != n_k:
            window += 1  # BUG: a cached call (n_q != n_k) lets w + 1 keys through
        mask = causal_mask(n_q, n_k, q.device, q.dtype, window=window)
        return mask if keys is None else mask.masked_fill(~keys, float("-inf"))


CORPUS.correct("attention", "sink_attention", CausalAttentionConfig, attention_as(SinkAttention), promises=SINKS,
               why="attention sinks: a learned logit per head joins the softmax, so rows of weights sum to below 1")
CORPUS.mutant("attention", "sink_takes_value", CausalAttentionConfig, attention_as(SinkTakesValue), like=SINKS,
              catches="softmax_heads", bug="the sink's share of each row attends to the first token's value")
CORPUS.mutant("attention", "sink_after_softmax", CausalAttentionConfig, attention_as(SinkAfterSoftmax), like=SINKS,
              catches="sinks", bug="the sink applied after the softmax: each row scaled by 1/(1 + e^sink)")
CORPUS.mutant("attention", "sink_per_kv_head", CausalAttentionConfig, attention_as(SinkPerKVHead), like=SINKS,
              catches="sinks", bug="one sink per kv head repeated over its group, as k and v are")
CORPUS.mutant("attention", "softcap_forgotten_in_forward", CausalAttentionConfig,
              attention_as(SoftcapForgottenInForward), like=CAUSAL, catches="softmax_heads",
              bug="scores() caps, but forward takes the fused SDPA kernel without the cap")
CORPUS.mutant("attention", "window_off_by_one_cached", CausalAttentionConfig, attention_as(WindowOffByOneCached),
              like=CAUSAL, catches="softmax_heads", bug="the sliding window lets w + 1 keys through in cached calls only")


# --- the core attention's own sinks (sinks = true) broken ------------------------------------------------

def build_sinks_dropped(config: CausalAttentionConfig, ctx: BuildContext) -> CausalSelfAttention:
    m = ctx.model
    return CausalSelfAttention(d_model=m.d_model, n_heads=m.n_heads, n_kv_heads=m.kv_heads, bias=m.bias,
                               dropout=m.dropout, head_dim=m.head_dim, qk_norm=config.qk_norm,
                               qk_norm_eps=config.qk_norm_eps, qk_norm_offset=config.qk_norm_offset,
                               logit_softcap=config.logit_softcap, sliding_window=config.sliding_window,
                               query_scale=config.query_scale, qkv_bias=config.qkv_bias,
                               out_bias=config.out_bias)  # BUG: sinks not passed on


class SinksOnlyTraced(CausalSelfAttention):
    def _sink_key(self, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, sinks: torch.Tensor):
        return k, v, mask  # BUG: weights() joins the sinks, the SDPA path of forward never does


class SinkValueOfFirstToken(CausalSelfAttention):
    def _sink_key(self, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, sinks: torch.Tensor):
        k, _, mask = super()._sink_key(k, v, mask, sinks)
        return k, torch.cat((v, v[..., :1, :]), dim=-2), mask  # BUG: the sink key carries token 0's value


CORPUS.mutant("attention", "sinks_dropped", CausalAttentionConfig, build_sinks_dropped, like=CAUSAL,
              catches="sink_option", bug="the config's sinks = true is not passed on: no sinks at all")
CORPUS.mutant("attention", "sinks_only_traced", CausalAttentionConfig, attention_as(SinksOnlyTraced), like=CAUSAL,
              catches="softmax_heads", bug="weights() has the sinks, the SDPA path of forward leaves them out")
CORPUS.mutant("attention", "sink_value_of_first_token", CausalAttentionConfig, attention_as(SinkValueOfFirstToken),
              like=CAUSAL, catches="softmax_heads", bug="the sink's extra key carries the first token's value")


# --- blockspec-attention's latent attention (mla) broken ------------------------------------------------

def mla_as(cls: type) -> object:
    """build_mla, building the mutant's class."""

    def build(config: MLAConfig, ctx: BuildContext) -> LatentAttention:
        m = ctx.model
        return cls(d_model=m.d_model, n_heads=m.n_heads, rope_head_dim=m.head_dim, nope_head_dim=config.nope_head_dim,
                   v_head_dim=config.v_head_dim, kv_lora_rank=config.kv_lora_rank, q_lora_rank=config.q_lora_rank,
                   bias=m.bias, dropout=m.dropout, latent_norm_eps=config.latent_norm_eps,
                   query_scale=config.query_scale)

    return build


class MLAPrefixForgotten(LatentAttention):
    def forward(self, x: torch.Tensor, positional: PositionalEncoding, start: int = 0,
                cache: LayerCache | None = None) -> torch.Tensor:
        if cache is not None:
            _, latent, nothing = self.cacheable(x, positional, cache.positions(start))
            cache.update(latent, nothing, start)  # BUG: the latents update returns, the prefix's, unused
        return super().forward(x, positional, start)


class MLAQueriesUnturned(LatentAttention):
    def cacheable(self, x: torch.Tensor, positional: PositionalEncoding, start=0):
        q_nope, q_rope = self.queries(x).split((self.nope_head_dim, self.rope_head_dim), dim=-1)
        latent, k_rope = self.kv_down(x).split((self.kv_lora_rank, self.rope_head_dim), dim=-1)
        k_rope = k_rope[:, None]  # (B, 1, N, hs_r)
        if positional.rotates:
            _, k_rope = rotate_at(positional, q_rope, k_rope, start)  # BUG: only the shared key turns
        cached = torch.cat((self.kv_norm(latent)[:, None], k_rope), dim=-1)  # (B, 1, N, r + hs_r)
        return torch.cat((q_nope, q_rope), dim=-1), cached, cached[..., :0]


CORPUS.mutant("attention", "mla_prefix_forgotten", MLAConfig, mla_as(MLAPrefixForgotten), like=MLA,
              serves=one_latent, catches="softmax_heads",
              bug="the latent is cached, but a cached call attends to its own tokens only")
CORPUS.mutant("attention", "mla_queries_unturned", MLAConfig, mla_as(MLAQueriesUnturned), like=MLA,
              serves=one_latent, catches=RELATIVE_ATTENTION,
              bug="the shared rotary key turns, the queries' rotary part does not")


# --- sizes a build does not serve (issue 27, item 3): refused draws are not examples ---------------------

def even_heads(model) -> bool:
    """n_heads even"""
    return model.n_heads % 2 == 0


def refusing_odd_heads(config: CausalAttentionConfig, ctx: BuildContext) -> CausalSelfAttention:
    """Heads split in two halves (differential attention does): an odd head count is refused, as the plugin
    API allows, with ValueError."""
    if not even_heads(ctx.model):
        raise ValueError(f"n_heads must be even to split heads in two halves, found {ctx.model.n_heads}")
    return builtin.build_causal_attention(config, ctx)


CORPUS.correct("attention", "odd_heads_refused", CausalAttentionConfig, refusing_odd_heads, promises=CAUSAL,
               why="its build raises ValueError for an odd n_heads and declares no constraint: those draws are "
                   "not applicable, the others are checked")
CORPUS.correct("attention", "even_heads_served", CausalAttentionConfig, refusing_odd_heads, promises=CAUSAL,
               serves=even_heads, why="it registers serves=even_heads: the kit draws only even head counts")
