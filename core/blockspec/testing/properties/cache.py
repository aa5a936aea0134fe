"""The cache path: what decoding through a KV cache computes equals what one uncached call computes.

Generation runs a prompt through the cache in one call at position 0, then a token (or a chunk)
at a time, each call at the position where the last ended (``blockspec.generation.tokens``). Every
check here feeds positions 0..T-1 that way (a ``CacheCase``: a prefix, then chunks) and compares
each call's output with the same rows of one uncached call over all T positions. T reaches past
the context length and past the tables components keep, where cache bugs live. Parameters are
perturbed first, as training leaves them: a promise about the cache holds for every value.
``cache_padding`` decodes a left-padded (ragged) batch the same way, each row against that row alone.
"""

from __future__ import annotations

import torch

from blockspec.modules.kv_cache import CacheLayout, KVCache, LayerCache, layout_of
from blockspec.modules.positional import PositionalEncoding
from blockspec.registry.components import Component
from blockspec.testing.cache_cases import CacheCase, fitted
from blockspec.testing.harness import build_isolated, dtype_of, normal
from blockspec.testing.properties.base import Property, assert_close

BIAS_ROWS = 32  # how many of a call's last query rows the score-bias check compares
SLACK = 3  # rows a cache holds past the last position: an attention must use what update() returns, not the buffer


def _cases(component: Component):
    from blockspec.testing.cache_strategies import cache_cases

    return cache_cases(component)


def _near_cases(component: Component):
    from blockspec.testing.cache_strategies import near_cache_cases

    return near_cache_cases(component)


def perturb(module: torch.nn.Module, seed: int) -> None:
    """Add seeded noise to every parameter, as training would (1/√fan-in for matrices, 0.5 for vectors and
    scalars), so that a table or a gate that starts at zero cannot hide how it is used."""
    generator = torch.Generator().manual_seed(seed + 7)
    with torch.no_grad():
        for p in module.parameters():
            scale = p.shape[-1] ** -0.5 if p.dim() > 1 else 0.5
            noise = torch.randn(p.shape, generator=generator, dtype=torch.float64) * scale
            p.add_(noise.to(device=p.device, dtype=p.dtype))


def decodable_limit(module: torch.nn.Module, case: CacheCase) -> int | None:
    """How far cached decoding can agree with one call: a bounded table's end; for an encoder whose frequencies
    follow the call's length (``length_dependent``: dynamic NTK or longrope RoPE, as transformers computes
    them), its ``switch_length`` (else the context length), past which a cached key keeps the frequencies of
    the call that stored it, by design."""
    if getattr(module, "length_dependent", False):
        switch = getattr(module, "switch_length", None) or case.model.context_length
        return min(switch, getattr(module, "max_positions", None) or switch)
    return getattr(module, "max_positions", None)


def tolerance(case: CacheCase) -> dict[str, float]:
    """Cached and uncached calls take different kernels (a masked SDPA, a sliced table): rounding apart."""
    return dict(atol=1e-7, rtol=1e-6) if case.dtype == "float64" else dict(atol=1e-4, rtol=1e-4)


def _where(first: int, end: int) -> str:
    prefix = f"after positions 0..{first - 1}" if first else "from position 0"
    return f"positions {first}..{end - 1} ({prefix})"


# ---- positional encoders: each hook, per call, at its start ----

def check_cache_positions(component: Component, case: CacheCase, device: str) -> None:
    """Each hook the encoder uses, called per prefix and chunk at its start, gives the rows of one call at 0;
    score_bias(n_q, n_k, start) with a cache (n_k = start + n_q) and without (n_k = n_q) is the matching
    slice of the square bias."""
    module = build_isolated(component, case, device=device).module
    perturb(module, case.seed)
    case = fitted(case, decodable_limit(module, case))
    with torch.no_grad():
        if getattr(module, "adds", False):
            _check_embed(module, case, device)
        if getattr(module, "rotates", False):
            _check_rotate(module, case, device)
        if getattr(module, "biases", False):
            _check_bias(module, case)


def _check_embed(module: PositionalEncoding, case: CacheCase, device: str) -> None:
    x = normal(case, case.batch, case.length, case.model.d_model, device=device)  # (B, T, d)
    whole = module.embed(x, 0)
    for first, end in case.calls():
        assert_close(module.embed(x[:, first:end], first), whole[:, first:end],
                     f"embed(x, start={first}) at {_where(first, end)} vs one call over 0..{case.length - 1}",
                     **tolerance(case))


def _check_rotate(module: PositionalEncoding, case: CacheCase, device: str) -> None:
    m, n = case.model, case.length
    q = normal(case, case.batch, m.n_heads, n, m.head_dim, offset=1, device=device)  # (B, h, T, hs)
    k = normal(case, case.batch, m.kv_heads, n, m.head_dim, offset=2, device=device)  # (B, kv, T, hs)
    whole = module.rotate(q, k, 0)
    for first, end in case.calls():
        part = module.rotate(q[..., first:end, :], k[..., first:end, :], first)
        for name, got, want in zip("qk", part, whole):
            assert_close(got, want[..., first:end, :], f"rotate(q, k, start={first})'s {name} at "
                         f"{_where(first, end)} vs one call over 0..{n - 1}", **tolerance(case))


def _check_bias(module: PositionalEncoding, case: CacheCase) -> None:
    n, heads = case.length, case.model.n_heads
    square = full_bias(module.score_bias(n, n, 0), heads, n, n, f"score_bias({n}, {n}, 0)")  # (..., h, T, T)
    for first, end in case.calls():
        size = end - first
        rows = range(max(first, end - BIAS_ROWS), end)  # a long call's last rows: O(T) compared, not O(T²)
        for keys_from in dict.fromkeys((0, first)):  # with a cache: keys 0..end-1; without: first..end-1
            call = f"score_bias({size}, {end - keys_from}, {first})"
            got = full_bias(module.score_bias(size, end - keys_from, first), heads, size, end - keys_from, call)
            want = square[..., rows.start:end, keys_from:end]
            _assert_causal_close(got[..., rows.start - first:, :], want, rows.start, keys_from,
                                 f"{call} vs rows {rows.start}..{end - 1}, columns {keys_from}..{end - 1} "
                                 f"of score_bias({n}, {n}, 0)", case)


def full_bias(bias: torch.Tensor | None, heads: int, n_q: int, n_k: int, call: str) -> torch.Tensor:
    """A score bias broadcast to the scores it is added to: (h, n_q, n_k), or (B, h, n_q, n_k) if 4-D."""
    if bias is None:
        raise AssertionError(f"{call} returned None, but the encoder's biases flag is set")
    target = (*bias.shape[:-3], heads, n_q, n_k)
    try:
        fits = torch.broadcast_shapes(tuple(bias.shape), target) == target
    except RuntimeError:
        fits = False
    if not fits:
        raise AssertionError(f"{call} has shape {tuple(bias.shape)}, which does not broadcast to the "
                             f"scores of {n_q} queries and {n_k} keys {target}")
    return bias.expand(target)


def _assert_causal_close(got: torch.Tensor, want: torch.Tensor, first: int, keys_from: int, what: str,
                         case: CacheCase) -> None:
    """Compare where the causal mask lets a query see the key; entries equal as values (-inf too) agree."""
    got, want = got.double(), want.double()
    queries = torch.arange(first, first + got.shape[-2], device=got.device)
    keys = torch.arange(keys_from, keys_from + got.shape[-1], device=got.device)
    hidden = (keys[None, :] > queries[:, None]) | (got == want)  # (n_q, n_k), broadcast over heads
    assert_close(got.masked_fill(hidden, 0.0), want.masked_fill(hidden, 0.0), what, **tolerance(case))


# ---- attention: decoded through a LayerCache, with reference encoders ----

class ReferenceEncoder(PositionalEncoding):
    """The contract of the positional hooks, written out: RoPE (half layout) at positions start..start+N-1,
    and a score bias -slope_h·(i - j) + 0.5·cos(0.37·j) over query positions i = start..start+n_q-1 and key
    positions j = start+n_q-n_k..start+n_q-1 (the keys end where the queries end). The cosine of the key's
    absolute position makes a wrong ``start`` visible, which a purely relative bias would hide."""

    def __init__(self, n_heads: int, *, rotates: bool, biases: bool, dtype: torch.dtype) -> None:
        super().__init__(max_positions=None)
        self.rotates, self.biases, self.dtype = rotates, biases, dtype
        slopes = torch.tensor([2.0 ** -(h + 1) for h in range(n_heads)], dtype=torch.float64)
        self.register_buffer("slopes", slopes, persistent=False)  # (h,)

    def rotate(self, q: torch.Tensor, k: torch.Tensor, start: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        n, hs = q.shape[-2], q.shape[-1]
        theta = 10000.0 ** (-torch.arange(0, hs, 2, dtype=torch.float64) / hs)  # (hs/2,)
        angles = torch.arange(start, start + n, dtype=torch.float64)[:, None] * theta[None, :]  # (N, hs/2)
        cos, sin = (torch.cat((t, t), dim=-1).to(device=q.device, dtype=q.dtype) for t in (angles.cos(), angles.sin()))
        return _turn(q, cos, sin), _turn(k, cos, sin)

    def score_bias(self, n_q: int, n_k: int, start: int = 0) -> torch.Tensor:
        device = self.slopes.device
        queries = torch.arange(start, start + n_q, dtype=torch.float64, device=device)
        keys = torch.arange(start + n_q - n_k, start + n_q, dtype=torch.float64, device=device)
        distance = queries[:, None] - keys[None, :]  # (n_q, n_k)
        bias = -self.slopes[:, None, None] * distance + 0.5 * torch.cos(0.37 * keys)  # (h, n_q, n_k)
        return bias.to(self.dtype)


def _turn(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)  # (..., N, hs/2) each
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


def reference_encoder(case: CacheCase, device: str) -> ReferenceEncoder:
    """The case's reference encoder: none, rotary, bias or both."""
    encoder = ReferenceEncoder(case.model.n_heads, rotates=case.encoder in ("rotary", "both"),
                               biases=case.encoder in ("bias", "both"), dtype=dtype_of(case))
    return encoder.to(device)


def cache_tensors(module: torch.nn.Module, default: CacheLayout, batch: int, slots: int,
                  like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Zero keys and values for one layer as ``KVCache.for_model`` sizes them: the module's ``cache_layout``
    (a latent attention's), else ``default``; (B, kv, slots, width) each."""
    kv, keys, values = layout_of(module, default)
    return like.new_zeros(batch, kv, slots, keys), like.new_zeros(batch, kv, slots, values)


def layer_cache(case: CacheCase, like: torch.Tensor, module: torch.nn.Module) -> LayerCache:
    """One layer's cache as ``KVCache.for_model`` makes it, T + SLACK slots, zeros."""
    default = CacheLayout(case.model.kv_heads, case.model.head_dim, case.model.head_dim)
    return LayerCache(*cache_tensors(module, default, case.batch, case.length + SLACK, like))


def check_cache_attention(component: Component, case: CacheCase, device: str) -> None:
    """forward(x, positional, start, cache) per prefix and chunk gives the rows of one uncached call, with no
    encoder, a rotary one, a score bias, or both."""
    module = build_isolated(component, case, device=device).module
    perturb(module, case.seed)
    encoder = reference_encoder(case, device)
    x = normal(case, case.batch, case.length, case.model.d_model, device=device)  # (B, T, d)
    cache = layer_cache(case, x, module)
    with torch.no_grad():
        whole = module(x, encoder, 0)
        parts = [(first, end, module(x[:, first:end], encoder, first, cache)) for first, end in case.calls()]
    for first, end, part in parts:
        assert_close(part, whole[:, first:end], f"attention outputs at {_where(first, end)} through a LayerCache "
                     f"({case.encoder} encoder) vs one uncached call", **tolerance(case))


def check_relative_attention(component: Component, case: CacheCase, device: str) -> None:
    """With a relative encoder (the reference RoPE), attention depends on offsets only: the same tokens at
    positions start.. give the outputs they give at 0.. (rotating v, or positions leaking in otherwise, fails)."""
    module = build_isolated(component, case, device=device).module
    perturb(module, case.seed)
    encoder = ReferenceEncoder(case.model.n_heads, rotates=True, biases=False, dtype=dtype_of(case)).to(device)
    x = normal(case, case.batch, case.length, case.model.d_model, device=device)  # (B, T, d)
    start = case.length + case.seed % 97  # anywhere past the first call's positions
    with torch.no_grad():
        at_zero, shifted = module(x, encoder, 0), module(x, encoder, start)
    assert_close(shifted, at_zero, f"attention outputs at positions {start}.. vs the same tokens at 0.. (RoPE "
                 "encoder: scores depend on offsets only)", **tolerance(case))


def paddings(case: CacheCase) -> list[int]:
    """Each row's left padding in ``check_cache_padding``: row 0 none (the longest prompt), the others drawn
    from the case's seed, each leaving at least one real position."""
    rows = case.batch + 1
    return [0] + [(case.seed * (2 * r + 3) + r) % case.length for r in range(1, rows)]


def check_cache_padding(component: Component, case: CacheCase, device: str) -> None:
    """A ragged batch: rows left-padded by different amounts, decoded through a ``LayerCache`` that carries the
    padding (the prefix, then chunks), give each row's outputs of that row alone in one uncached call."""
    module = build_isolated(component, case, device=device).module
    perturb(module, case.seed)
    encoder = reference_encoder(case, device)
    pads = paddings(case)
    x = normal(case, len(pads), case.length, case.model.d_model, device=device)  # (B, T, d)
    padding = torch.tensor(pads, device=device)
    default = CacheLayout(case.model.kv_heads, case.model.head_dim, case.model.head_dim)
    cache = LayerCache(*cache_tensors(module, default, len(pads), case.length + SLACK, x), padding)
    with torch.no_grad():
        alone = [module(x[r:r + 1, pad:], encoder, 0)[0] for r, pad in enumerate(pads)]  # each (T - pad, d)
        parts = [(first, end, module(x[:, first:end], encoder, first, cache)) for first, end in case.calls()]
    for first, end, part in parts:
        for row, pad in enumerate(pads):
            real = max(first, pad)  # the call's first real position of this row (slots below pad are padding)
            if real < end:
                assert_close(part[row, real - first:], alone[row][real - pad:end - pad],
                             f"row {row} (left padding {pad}) at slots {real}..{end - 1} through a LayerCache "
                             f"with padding {pads} ({case.encoder} encoder) vs that row alone", **tolerance(case))


# ---- a whole model, as generation runs it ----

def check_model_cache(component: Component, case: CacheCase, device: str) -> None:
    """A model's logits decoded through a KVCache (prefix, then chunks) equal its uncached logits."""
    from blockspec.testing.properties.model import solo_model

    model = solo_model(component, case, device)
    perturb(model, case.seed)
    limits = [limit for p in model.positionals if (limit := decodable_limit(p, case)) is not None]
    case = fitted(case, min(limits, default=None))
    generator = torch.Generator().manual_seed(case.seed + 3)
    ids = torch.randint(case.model.vocab_size, (case.batch, case.length), generator=generator).to(device)  # (B, T)
    cache = KVCache.for_model(model, batch_size=case.batch, max_length=case.length + SLACK)
    with torch.no_grad():
        whole = model(ids)
        parts = [(first, end, model(ids[:, first:end], start=first, cache=cache)) for first, end in case.calls()]
    for first, end, part in parts:
        assert_close(part, whole[:, first:end], f"logits at {_where(first, end)} through a KVCache vs one "
                     "uncached call", **tolerance(case))


CACHE = (
    Property(name="cache_positions", kind="positional", check=check_cache_positions, cases=_cases,
             summary="each hook per prefix and chunk at its start = rows of one call at 0; score_bias(n_q, n_k)"),
    Property(name="cache_attention", kind="attention", promise="causal", check=check_cache_attention,
             cases=_near_cases, summary="decoded through a LayerCache in chunks = one uncached call"),
    Property(name="cache_padding", kind="attention", promise="causal", check=check_cache_padding,
             cases=_near_cases, summary="a left-padded batch through a LayerCache with its padding = each row alone"),
    Property(name="relative_attention", kind="attention", check=check_relative_attention, cases=_near_cases,
             summary="with a relative (RoPE) encoder, outputs at positions start.. = outputs at 0.."),
)

MODEL_CACHE = tuple(  # one per kind that decodes, so other kinds' tables show no column for it
    Property(name="model_cache", kind=kind, promise=promise, check=check_model_cache, cases=_near_cases, share=0.5,
             summary="in a model: logits decoded through a KVCache in chunks = uncached logits")
    for kind, promise in (("positional", None), ("attention", "causal"), ("block", "causal"))
)

__all__ = ["CACHE", "MODEL_CACHE", "ReferenceEncoder", "full_bias", "perturb", "reference_encoder"]
