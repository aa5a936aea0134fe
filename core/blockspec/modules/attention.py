"""Causal self-attention: fused qkv, grouped kv heads, PyTorch's SDPA kernel."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from blockspec.modules.kv_cache import LayerCache
from blockspec.modules.norms import OffsetRMSNorm
from blockspec.modules.positional import PositionalEncoding, Start, rotate_at, score_bias_at
from blockspec.modules.taps import tap, tapping

Slots = tuple[torch.Tensor, torch.Tensor]  # a static cache's query slots (N_q,) and key slots (N_k,)


def qkv_split_sizes(n_heads: int, n_kv_heads: int, head_dim: int) -> tuple[int, int, int]:
    """The widths of q, k and v in the fused qkv projection's output, in that order: the one place
    they are computed, so the attention, the weight maps and the RoPE layout split at the same rows."""
    kv_width = n_kv_heads * head_dim
    return n_heads * head_dim, kv_width, kv_width


def attention_ops(*, qk_norm: str = "none", query_scale: float | None = None, logit_softcap: float | None = None,
                  sliding_window: int | None = None, sinks: bool = False) -> dict[str, str]:
    """The op text of each tap of an attention with these options: what it computes, as ``blockspec trace`` shows it.

    ``{positional}`` and ``{score_bias}`` are the tracer's to fill (the encoder is not the attention's)."""
    scaled = "q·kᵀ/√hs" if query_scale is None else f"q·kᵀ·{query_scale:g}"
    scores = f"{scaled}{{score_bias}}"
    if logit_softcap is not None:
        scores = f"{logit_softcap:g}·tanh(({scores})/{logit_softcap:g})"
    mask = "causally masked" if sliding_window is None else \
        f"causally masked, window {sliding_window} (a query sees its last {sliding_window} positions)"
    normed = "per head over head_dim" if qk_norm == "head" else "over all heads' width"
    return {
        "q": "qkv(x): queries, split into heads",
        "k": "qkv(x): keys, split into kv heads",
        "v": "qkv(x): values, split into kv heads",
        "q_norm": f"q_norm(q): queries RMS-normalised {normed}, learned scale",
        "k_norm": f"k_norm(k): keys RMS-normalised {normed}, learned scale",
        "q_rotated": "{positional}: q rotated by position",
        "k_rotated": "{positional}: k rotated by position",
        "score_bias": "{positional}: score bias",
        "scores": f"{scores}: soft-capped scores per head, before the mask",
        "weights": f"softmax({scores} + mask{', sink' if sinks else ''}): weights per head, {mask}"
                   + (", each head's sink logit taking a share and no value" if sinks else ""),
        "heads": "weights @ v, per head " + ("(SDPA)" if logit_softcap is None else "(explicit softmax, for the cap)"),
        "out": "proj(concat(heads)): attention output",
    }


class CausalSelfAttention(nn.Module):
    """Multi-head (or grouped-query) causal self-attention; no loop over heads.

    Taps: q, k, v (before rotation), q_norm, k_norm (with qk_norm), q_rotated, k_rotated (rotary
    encoders), score_bias (score-bias encoders), scores (with logit_softcap, while tapping), weights
    (only while tapping), heads (weights @ v), out.

    Options (each off by default, which is the plain attention): ``head_dim`` (each head's width,
    default d_model / n_heads; q projects to n_heads·head_dim and proj back to d_model);
    ``qk_norm`` ("head": RMSNorm over each head's head_dim; "all": over all heads' width) on q and k
    before rotation, with learned scales ``q_norm`` and ``k_norm`` (``qk_norm_offset``: scaling by 1 + w, w
    stored as 0, Gemma 3's); ``logit_softcap`` (scores ->
    cap·tanh(scores/cap) before the mask, on an explicit softmax instead of SDPA);
    ``sliding_window`` (query i sees keys i-w+1..i); ``query_scale`` (the factor the scores are
    multiplied by, instead of 1/sqrt(head_dim)); ``qkv_bias`` and ``out_bias``; ``sinks`` (gpt-oss: one
    learned logit per head, ``sinks`` (h,), joins every row's softmax and takes no value; None when off).
    For subclasses: ``value_head_dim`` (each head's value width, default head_dim: proj reads n_heads of them)
    and ``fused_qkv`` (False: no ``qkv`` projection is built; the subclass's ``project`` makes q, k, v).
    """

    # what the spec's [init] draws (assembly/initialisation.py); q_norm and k_norm keep their ones (zeros: offset)
    init_roles: ClassVar[Mapping[str, str]] = {
        "qkv.weight": "std", "qkv.bias": "zero", "proj.weight": "residual", "proj.bias": "zero", "sinks": "std",
    }

    def __init__(
        self,
        *,
        d_model: int,
        n_heads: int,
        n_kv_heads: int,
        bias: bool,
        dropout: float,
        head_dim: int | None = None,
        qk_norm: str = "none",
        qk_norm_eps: float = 1e-6,
        qk_norm_offset: bool = False,
        logit_softcap: float | None = None,
        sliding_window: int | None = None,
        query_scale: float | None = None,
        qkv_bias: bool | None = None,
        out_bias: bool | None = None,
        sinks: bool = False,
        value_head_dim: int | None = None,
        fused_qkv: bool = True,
    ) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.n_kv_heads = n_kv_heads
        self.head_dim = d_model // n_heads if head_dim is None else head_dim
        self.value_head_dim = self.head_dim if value_head_dim is None else value_head_dim  # what proj reads per head
        self.split_sizes = qkv_split_sizes(n_heads, n_kv_heads, self.head_dim)
        width, kv_width = self.split_sizes[:2]
        if fused_qkv:  # False: a subclass projects q, k and v its own way (latent attention)
            self.qkv = nn.Linear(d_model, sum(self.split_sizes), bias=bias if qkv_bias is None else qkv_bias)
        self.proj = nn.Linear(n_heads * self.value_head_dim, d_model, bias=bias if out_bias is None else out_bias)
        self.dropout = dropout
        if qk_norm not in ("none", "head", "all"):
            raise ValueError(f"qk_norm: expected 'none', 'head' or 'all', found {qk_norm!r}")
        self.qk_norm = qk_norm
        if qk_norm != "none":
            per_head, norm = qk_norm == "head", OffsetRMSNorm if qk_norm_offset else nn.RMSNorm
            self.q_norm = norm(self.head_dim if per_head else width, eps=qk_norm_eps)
            self.k_norm = norm(self.head_dim if per_head else kv_width, eps=qk_norm_eps)
        self.logit_softcap = logit_softcap
        self.sliding_window = sliding_window
        self.query_scale = query_scale
        self.sinks = nn.Parameter(torch.zeros(n_heads)) if sinks else None  # (h,) logits; None: no sinks

    def forward(
        self, x: torch.Tensor, positional: PositionalEncoding, start: int = 0, cache: LayerCache | None = None
    ) -> torch.Tensor:
        """x (B, N, d) at positions start..; with a cache, attends to the stored prefix too.

        With a cache of a ragged batch ``start`` is the shared slot: the cache gives each row's positions
        and the padding keys to hide (``LayerCache.positions``, ``key_mask``). A static cache
        (``StaticLayerCache``) returns all its slots, and their slots for the causal mask (``slots``)."""
        at = start if cache is None else cache.positions(start)
        q, k, v = self.cacheable(x, positional, at)
        keys = slots = None
        if cache is not None:
            keys = cache.key_mask(start, q.shape[-2])  # None: every stored key is a real one
            slots = cache.slots(start, q.shape[-2])  # None: the keys end where the queries do
            k, v = cache.update(k, v, start)  # (B, kv, start+N, hs) each; (B, kv, T_max, hs) when static
        k, v = self.expanded(k, v)
        bias = score_bias_at(positional, q.shape[-2], k.shape[-2], at) if positional.biases else None
        if tapping():
            self.tap_weights(q, k, bias, keys, slots)
        # keys and slots only when there are some: a subclass's attend(q, k, v, bias) keeps serving unpadded batches
        y = tap(self, "heads", self.attend(q, k, v, bias, *given(keys, slots)))  # (B, h, N, hs)
        batch, n_tokens = x.shape[:2]
        y = y.transpose(1, 2).reshape(batch, n_tokens, -1)  # (B, N, d)
        return tap(self, "out", self.proj(y))

    def cacheable(self, x: torch.Tensor, positional: PositionalEncoding,
                  start: Start = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The queries and what the cache stores for x (B, N, d): here q, k, v themselves (``project``); a
        subclass caching something else (a latent attention: its latent) returns that, in its ``cache_layout``,
        and ``expanded`` turns it into keys and values after the cache."""
        return self.project(x, positional, start)

    def expanded(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """What ``cacheable`` stored, every position so far -> keys and values: unchanged here."""
        return k, v

    def project(
        self, x: torch.Tensor, positional: PositionalEncoding, start: Start = 0
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x (B, N, d) -> q (B, h, N, hs), k and v (B, kv, N, hs), rotated if the encoder rotates."""
        batch, n_tokens, _ = x.shape
        q, k, v = self.qkv(x).split(self.split_sizes, dim=-1)
        q = q.view(batch, n_tokens, self.n_heads, self.head_dim).transpose(1, 2)  # (B, h, N, hs)
        k = k.view(batch, n_tokens, self.n_kv_heads, self.head_dim).transpose(1, 2)  # (B, kv, N, hs)
        v = v.view(batch, n_tokens, self.n_kv_heads, self.head_dim).transpose(1, 2)  # (B, kv, N, hs)
        q, k, v = tap(self, "q", q), tap(self, "k", k), tap(self, "v", v)
        if self.qk_norm != "none":
            q, k = self.normalise_qk(q, k)
            q, k = tap(self, "q_norm", q), tap(self, "k_norm", k)
        if positional.rotates:
            q, k = rotate_at(positional, q, k, start)
            q, k = tap(self, "q_rotated", q), tap(self, "k_rotated", k)
        return q, k, v

    def normalise_qk(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """qk_norm: q (B, h, N, hs) and k (B, kv, N, hs) RMS-normalised per head ("head") or over all heads ("all")."""
        if self.qk_norm == "head":  # over each head's head_dim (Qwen3, Gemma 3)
            return self.q_norm(q), self.k_norm(k)
        return _across_heads(self.q_norm, q), _across_heads(self.k_norm, k)  # over all heads' width (OLMo 2)

    @property
    def tap_ops(self) -> dict[str, str]:
        """Each tap's op text for ``blockspec trace``, from this attention's own options (window, scale, cap)."""
        return attention_ops(qk_norm=self.qk_norm, query_scale=self.query_scale, logit_softcap=self.logit_softcap,
                             sliding_window=self.sliding_window, sinks=self.sinks is not None)

    @property
    def scale(self) -> float:
        """What q·kᵀ is multiplied by: query_scale, or 1/sqrt(head_dim)."""
        return self.head_dim**-0.5 if self.query_scale is None else self.query_scale

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor | None,
               keys: torch.Tensor | None = None, slots: Slots | None = None) -> torch.Tensor:
        """SDPA of q (B, h, N_q, hs) over k, v (B, kv, N_k, hs), the queries being the last N_q positions.

        ``keys``: the cache's ``key_mask`` (B, 1, N_q, N_k) of a ragged batch, or None. ``slots``: a static
        cache's query and key slots (``LayerCache.slots``), from which the causal mask is built instead.

        SDPA's ``is_causal`` aligns the mask top-left, right only when N_q == N_k (no cache).
        One cached query sees every key: no mask. Otherwise, or with a score bias or a sliding
        window that hides keys, an explicit bottom-right aligned mask. A logit softcap has no SDPA
        form: the explicit softmax of ``weights``.
        """
        dropout = self.dropout if self.training else 0.0
        if self.logit_softcap is not None:
            weights = F.dropout(self.weights(q, k, bias, keys, slots), p=dropout)  # (B, h, N_q, N_k)
            return weights @ self._repeat_kv(v)  # (B, h, N_q, hs)
        gqa = self.n_kv_heads != self.n_heads
        n_q, n_k = q.shape[-2], k.shape[-2]
        windowed = self.sliding_window is not None and n_k > self.sliding_window
        scale = self.query_scale  # None: SDPA's own 1/sqrt(hs)
        plain = bias is None and not windowed and keys is None and slots is None and self.sinks is None
        if plain and n_q == n_k:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=dropout, enable_gqa=gqa,
                                                  scale=scale)
        if plain and n_q == 1:
            return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, enable_gqa=gqa, scale=scale)
        mask = self.full_mask(n_q, n_k, q, keys, slots)
        if bias is not None:
            mask = bias.to(q.dtype) + mask
        if self.sinks is not None:
            k, v, mask = self._sink_key(k, v, mask, self.sinks)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout, enable_gqa=gqa, scale=scale)

    def _sink_key(self, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor,
                  sinks: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The sinks as one more key for SDPA: key and value zero, so its score q·0 = 0 plus its mask entry,
        the head's sink logit, joins each row's softmax and adds nothing to the output."""
        zero = k.new_zeros(*k.shape[:-2], 1, k.shape[-1])  # (B, kv, 1, hs)
        k, v = torch.cat((k, zero), dim=-2), torch.cat((v, zero), dim=-2)  # (B, kv, N_k + 1, hs)
        return k, v, with_sink_column(mask, sinks)  # (B or 1, h, N_q, N_k + 1)

    def full_mask(self, n_q: int, n_k: int, q: torch.Tensor, keys: torch.Tensor | None = None,
                  slots: Slots | None = None) -> torch.Tensor:
        """The additive mask (n_q, n_k), or (B, 1, n_q, n_k) with the cache's ``keys``: causal, windowed, and
        no padding key seen; from a static cache's ``slots`` when it reports them."""
        if slots is None:
            mask = causal_mask(n_q, n_k, q.device, q.dtype, window=self.sliding_window)
        else:
            mask = slot_mask(*slots, q.dtype, window=self.sliding_window)
        return mask if keys is None else mask.masked_fill(~keys, float("-inf"))  # (B, 1, n_q, n_k)

    def tap_weights(self, q: torch.Tensor, k: torch.Tensor, bias: torch.Tensor | None,
                    keys: torch.Tensor | None = None, slots: Slots | None = None) -> None:
        """While tapping: the score bias, batched, the capped scores, and the weights of the q and k this
        forward pass uses."""
        if bias is not None:
            tap(self, "score_bias", batched_bias(bias, q.shape[0]))
        if self.logit_softcap is not None:
            tap(self, "scores", self.scores(q, k, bias))
        tap(self, "weights", self.weights(q, k, bias, *given(keys, slots)))

    def _repeat_kv(self, x: torch.Tensor) -> torch.Tensor:
        """(B, kv, N, hs) -> (B, h, N, hs): each kv head serves n_heads / n_kv_heads query heads."""
        if self.n_kv_heads == self.n_heads:
            return x
        return x.repeat_interleave(self.n_heads // self.n_kv_heads, dim=1)

    def scores(self, q: torch.Tensor, k: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        """The scores (B, h, N_q, N_k) before the mask: q·kᵀ·scale, plus the score bias, soft-capped if capped."""
        k = self._repeat_kv(k)  # (B, h, N, hs)
        if self.query_scale is None:
            scores = q @ k.transpose(-2, -1) / self.head_dim**0.5  # (B, h, N, N)
        else:
            scores = q @ k.transpose(-2, -1) * self.query_scale  # (B, h, N, N)
        if bias is not None:
            scores = scores + bias
        if self.logit_softcap is not None:
            scores = self.logit_softcap * torch.tanh(scores / self.logit_softcap)
        return scores

    def weights(self, q: torch.Tensor, k: torch.Tensor, bias: torch.Tensor | None = None,
                keys: torch.Tensor | None = None, slots: Slots | None = None) -> torch.Tensor:
        """The attention probabilities (B, h, N_q, N_k) that ``attend`` uses, made explicit for tracing."""
        scores = self.scores(q, k, bias) + self.full_mask(q.shape[-2], k.shape[-2], q, keys, slots)
        if self.sinks is None:
            return scores.softmax(dim=-1)
        return with_sink_column(scores, self.sinks).softmax(dim=-1)[..., :-1]  # the sink's column dropped


def with_sink_column(scores: torch.Tensor, sinks: torch.Tensor) -> torch.Tensor:
    """Masked scores (n_q, n_k), (h, n_q, n_k) or (B, h or 1, n_q, n_k) -> (B or 1, h, n_q, n_k + 1): each
    head's sink logit (h,) as the last column of every row."""
    n_q, n_k = scores.shape[-2:]
    scores = scores.expand(*torch.broadcast_shapes(scores.shape, (1, sinks.shape[0], n_q, n_k)))  # (B or 1, h, ..)
    column = sinks.to(scores.dtype).view(1, -1, 1, 1).expand(scores.shape[0], -1, n_q, 1)  # (h,) -> (B, h, N_q, 1)
    return torch.cat((scores, column), dim=-1)


def given(*optional: torch.Tensor | Slots | None) -> tuple[Any, ...]:  # Any: each keeps its parameter's type
    """Optional trailing arguments up to the last one given: a subclass whose ``attend`` or ``weights``
    predates them is called as before wherever they are None."""
    end = len(optional)
    while end and optional[end - 1] is None:
        end -= 1
    return optional[:end]


def _across_heads(norm: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """A norm over all heads' width applied to x (B, h, N, hs): heads joined, normalised, split again."""
    batch, heads, n_tokens, head_dim = x.shape
    joined = x.transpose(1, 2).reshape(batch, n_tokens, heads * head_dim)  # (B, N, h·hs)
    return norm(joined).view(batch, n_tokens, heads, head_dim).transpose(1, 2)  # (B, h, N, hs)


def causal_mask(n_q: int, n_k: int, device: torch.device, dtype: torch.dtype,
                window: int | None = None) -> torch.Tensor:
    """(n_q, n_k) additive mask: 0 where query i may see key j (j <= i + n_k - n_q), -inf elsewhere.

    With a ``window`` w, query i sees only the last w keys, its own included: i + n_k - n_q - w < j.
    """
    allowed = torch.ones(n_q, n_k, dtype=torch.bool, device=device).tril(diagonal=n_k - n_q)
    if window is not None:
        allowed = allowed.triu(diagonal=n_k - n_q - window + 1)
    return torch.zeros(n_q, n_k, dtype=dtype, device=device).masked_fill(~allowed, float("-inf"))


def slot_mask(queries: torch.Tensor, keys: torch.Tensor, dtype: torch.dtype,
              window: int | None = None) -> torch.Tensor:
    """(N_q, N_k) additive mask from the slots of queries (N_q,) and keys (N_k,): a key is seen iff its slot
    is at most the query's (and, with a ``window`` w, above the query's - w). Shapes fixed, values tensors."""
    allowed = keys[None, :] <= queries[:, None]  # (N_q, N_k)
    if window is not None:
        allowed = allowed & (keys[None, :] > queries[:, None] - window)
    return torch.zeros(allowed.shape, dtype=dtype, device=keys.device).masked_fill(~allowed, float("-inf"))


def batched_bias(bias: torch.Tensor, batch: int) -> torch.Tensor:
    """A score bias (h, N_q, N_k) or broadcastable -> (B, h, N_q, N_k) view, so its shape reads like the weights'."""
    bias = bias if bias.dim() == 4 else bias.reshape(1, *([1] * (3 - bias.dim())), *bias.shape)  # (1, h, N_q, N_k)
    return bias.expand(batch, *bias.shape[1:])  # (B, h, N_q, N_k)
