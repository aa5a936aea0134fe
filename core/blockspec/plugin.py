"""The plugin author's API: everything a component plugin imports. Stable within API version 1.

A plugin imports from here and nowhere else in blockspec (its tests may also use
``blockspec.testing``, the conformance kit). Every other module is internal and may move
between releases; names here keep their meaning for as long as ``API_VERSION`` is 1, and a
plugin may declare ``BLOCKSPEC_API = 1`` in its module to be refused, not misread, by a
core with another API.

Registering (no torch needed)::

    from attrs import field, frozen
    from blockspec.plugin import BuildContext, Register, greater_than, hookimpl

    @frozen(kw_only=True)
    class ScaleNormConfig:
        \"\"\"ScaleNorm: g·x/||x|| with one learned scalar g.\"\"\"
        eps: float = field(default=1e-5, validator=greater_than(0.0))

    def build_scalenorm(config: ScaleNormConfig, ctx: BuildContext):
        from .scalenorm import ScaleNorm  # torch loads here, not when the plugin is listed
        return ScaleNorm(ctx.model.d_model, eps=config.eps)

    @hookimpl
    def blockspec_register(register: Register) -> None:
        register("norm", "scalenorm", ScaleNormConfig, build_scalenorm, promises=("scale_invariant",))

What is here:

- ``hookimpl``: marks ``blockspec_register(register)``; ``register`` is a ``Register``
  (kind, name, config_cls, build, summary=, promises=, serves=), checked as each call arrives.
- ``Build``: ``Callable[[Config, BuildContext], nn.Module]``; ``Config`` is the component's
  own frozen attrs config instance. A build raises ValueError or TypeError for sizes it
  cannot serve: the conformance kit counts those draws as not applicable (never as failures).
  ``serves=``, optional, says which sizes it serves, so the kit draws only those and a spec with
  others is refused in one line: a callable ``(ModelConfig) -> bool`` whose docstring's first line
  says it (``def even_heads(model): \"\"\"n_heads even\"\"\"; return model.n_heads % 2 == 0``).
- ``BuildContext``: ``model`` (the spec's ``ModelConfig``: d_model, n_heads, head_dim, kv_heads,
  d_ff, vocab_size, context_length, ...), ``embedding`` (the token ``nn.Embedding``,
  always present, for heads that tie to it) and ``layer`` (``LayerParts``, for the per-layer
  kinds ``block``, ``ffn`` and ``attention``; None otherwise): ``ctx.layer.attention("attn")``, ``.ffn("ffn")``,
  ``.norm("norm1")`` and ``.activation("act")`` each build a fresh module from the spec's
  component, recorded under the name given; ``.index`` (the layer's, from 0) and ``.dropout`` too.
- Blocks: a ``block`` component owns the residuals; its ``forward(x, positional, start=0,
  cache=None)`` calls attention through ``attend(attn, x, positional, start, cache)``, which
  passes the ``LayerCache`` (untouched: one per layer) only when decoding. ``PreNormBlock`` and
  ``PostNormBlock`` are the core's two classic layouts.
- Validators for config fields that name the field in errors: ``positive``, ``at_least``,
  ``greater_than``, ``in_range``, ``one_of``. ``OMIT_DEFAULT``: field metadata that keeps a field
  out of dumped specs while it holds its default (for options added after specs were written).
  ``sized_by(entries, per)``: field metadata for a tuple option with ``entries(config, model)`` entries (one
  per head, per rotated pair); the assembler refuses another length at its key, and the kit fits the lists
  it draws to the drawn sizes.
  ``FieldError(field, message)``: what they raise; raise it from ``__attrs_post_init__`` for a check that
  relates fields, and the spec's error names ``$.<kind>.<field>``.
- ``ContextLengthError``: what a bounded positional encoder raises past its table.
- Kind base classes: ``PositionalEncoding`` (every positional component subclasses it: flags
  ``adds``/``rotates``/``biases`` and hooks ``embed``/``rotate``/``score_bias``,
  ``max_positions`` and ``check_length``) and ``Activation`` (``gated = True`` for 2·d_ff -> d_ff).
  Norms, heads and attention are plain ``nn.Module``: (B, N, d) -> (B, N, d) for norm and
  attention, ``forward(x, positional, start, cache=None)`` for attention.
- Positions: a call covers positions start..start+N-1. ``embed(x, start)`` and
  ``rotate(q, k, start)`` give at each position what one call from 0 gives there (the cache keeps
  rotated keys). ``score_bias(n_q, n_k, start)``: queries at start..start+n_q-1, keys ending where
  they end (start+n_q-n_k..start+n_q-1; n_k = n_q without a cache, start + n_q with one), equal to
  that slice of ``score_bias(T, T, 0)``, T = start + n_q.
  ``start`` is an int, or (ragged batches, compiled steps) a long tensor: 0-d (every row) or (B, 1) (each
  row's first position; left padding's negative positions read as 0, ``positions(start, N)``). An encoder
  whose hooks take tensor starts, vectorised, sets ``tensor_positions = True``; otherwise the core calls them
  row by row with ints. Callers go through ``embed_at``, ``rotate_at`` and ``score_bias_at``, which dispatch.
- ``KVCache`` and ``LayerCache``: an attention component's ``forward`` receives one layer's
  ``LayerCache`` during decoding. In order: project q, k, v (k, v as (B, [model] kv_heads, N,
  [model] head_dim)); ``positional.rotate`` if it rotates; ``k, v = cache.update(k, v, start)`` (all
  keys and values so far: use these, not the cache's buffers); ``positional.score_bias(N,
  k.shape[-2], start)`` if it biases; a causal mask aligned bottom-right (query i sees keys
  j <= i + n_k - n_q), which a cached call of more than one token needs too. A ragged (left-padded)
  batch: rotate and bias at ``cache.positions(start)`` (through ``rotate_at``/``score_bias_at``), and hide
  what ``cache.key_mask(start, N)`` (B, 1, N, n_k) bool marks False (None: nothing to hide).
  An attention that caches something else (latent attention: the compressed latent, no values) declares
  a ``cache_layout`` (``CacheLayout(kv_heads, key_width, value_width)``): ``KVCache.for_model`` sizes its
  layer's cache by it, and ``update`` takes and returns tensors of that layout. A ``CausalSelfAttention``
  subclass overrides ``cacheable`` (what it stores) and ``expanded`` (keys and values from it) and keeps
  the core's ``forward``.
  docs/conformance-kit.md ("Contracts") has the whole interface; the kit checks it.
- Initialisation: the spec's ``[init]`` draws only the parameters a module declares in
  ``init_roles``, a mapping from a parameter's dotted name below the module to its role; every
  other parameter keeps what the module's ``__init__`` gave it (a gate set to zero stays zero).
  Roles: ``"std"`` (N(0, std²): hidden linear weights, position tables), ``"residual"`` (N(0,
  (std/√(2·n_layers))²) with ``residual_scaling``: a projection whose output is added to the
  residual stream, whatever it is called), ``"zero"`` (biases) and ``"token_embedding"`` (N(0,
  embedding_std²); the core's token embedding). Declare it on the class
  (``init_roles: ClassVar[Mapping[str, InitRole]] = {"w_out.weight": "residual"}``), or on an
  instance a build returns with ``declare_init(nn.Linear(...), {"weight": "std"})``. A name
  on a None (an absent bias, an optional submodule) is skipped; a name the module lacks or an
  unknown role fails the build. Where an outer module and its child both name a parameter, the
  outer one's role wins. The core's attention and dense FFN, and the first-party plugins,
  declare theirs (GPT-2's initialisation by default); a loaded model is filled from its file.
- Adapters: an ``adapter`` component's build gets ``ctx.target``, the built model's ``nn.Linear`` it wraps,
  and returns an ``Adapter`` (keeps it as ``base_layer``, adds its own parameters, ``merged()`` folds
  both into a plain ``nn.Linear``; ``linear_like(base, weight)`` makes that layer). It leaves the base's
  ``requires_grad`` as it finds it: freezing is the trainer's choice.
- ``tap(module, name, x)`` and ``tapping()``: how a module shows its inner stages to
  ``blockspec trace`` (docs/trace.md). ``tap`` returns ``x`` and costs a few tens of
  nanoseconds unless a trace is recording.
- Building blocks to reuse or subclass, the objects the core itself builds: ``FeedForward``
  (the dense FFN: ``up``, ``act``, ``down``), ``CausalSelfAttention`` (the built-in attention:
  fused qkv, GQA, SDPA; ``project``, ``attend``, ``scores`` and ``weights`` are its seams) and
  ``causal_mask(n_q, n_k, device, dtype, window=None)`` (the additive mask, aligned bottom-right),
  ``OffsetRMSNorm`` (an RMSNorm scaling by 1 + weight, weight stored as 0: Gemma's; its class attribute
  ``offset = True`` tells the kit so).

Conventions the core relies on (by attribute, on any module of a built model):

- ``aux_loss`` and ``aux_loss_coef``: a module that keeps an auxiliary training loss sets
  ``aux_loss`` (a scalar tensor) in each training-mode forward and None otherwise; the trainer
  adds ``aux_loss_coef * aux_loss`` of every module whose ``aux_loss`` is not None to the loss.
  The loss must carry a gradient to what it balances: a mixture's load-balancing loss is computed
  from the router's probabilities (not detached, not from the top-k indices alone). The promise
  ``aux_loss`` (ffn, with ``mixture``) asks the conformance kit to check it.
- The mixture of experts (the ffn promise ``mixture``; docs/conformance-kit.md, "For block, FFN/MoE
  and attention authors"): ``router``, an ``nn.Linear`` d -> E logits; ``routing(logits)`` maps
  router logits (T, E) to ``(weights, index, probs)``: weights (T, k) in the logits' dtype, expert
  ids (T, k), the softmax probabilities (T, E) (what an aux loss reads); the weights are the top-k
  probabilities, renormalised to sum to 1 when ``renormalize`` is true. ``top_k``: experts per
  token (absent: 1, a Switch router, with no config field needed); ``renormalize`` (absent: false);
  ``shared_output(x)``: what always-applied experts add (absent: nothing); DeepSeek V3's ``scoring``
  ("softmax", or "sigmoid"), ``n_group``/``topk_group``, ``correction`` (E,) for the choice only and
  ``routed_scaling`` (each absent: Mixtral's routing). The experts are either
  ``experts``, an ``nn.ModuleList`` of E modules each mapping tokens (T, d) -> (T, d), or stacked
  tensors in Hugging Face Mixtral's layout with the activation ``act``: ``up`` (E, k·d_ff, d)
  (k = 2 for a gated activation, gate half first), ``down`` (E, d, d_ff), ``up_bias`` (E, k·d_ff)
  and ``down_bias`` (E, d) or None. The config has ``n_experts``. The output is, token by token,
  Σ weight·expert(x) over the chosen experts plus ``shared_output(x)``.
- ``tap_ops``: a class attribute ``{tap name: op text}`` that ``blockspec trace`` shows for each
  ``tap`` the module makes; ``{child}`` in the text is a child module's class, ``{child.attr}`` its
  attribute (``"up(x): d -> {up.out_features}"``). Where the text follows the module's own options,
  make it a property (``CausalSelfAttention``'s names its window, query scale and cap).
- Initialisation: ``init_roles`` (above): what a module declares is drawn by ``[init]``, the rest is its own.
- ``active_parameters()`` (``ActiveParameters``, optional): a module some of whose parameters each token
  skips (a mixture of experts: top_k of n_experts) returns how many of its own parameters one token
  passes through; ``blockspec show`` and ``count_parameters(...).active`` count every other parameter
  as active. blockspec-moe's ``ffn:moe`` implements it.

Importing this module loads no torch. The torch-backed names (``PositionalEncoding``,
``Start``, ``positions``, ``embed_at``, ``rotate_at``, ``score_bias_at``, ``Activation``, ``KVCache``, ``LayerCache``,
``CacheLayout``, ``tap``, ``tapping``, ``FeedForward``,
``CausalSelfAttention``, ``causal_mask``, ``OffsetRMSNorm``, ``declare_init``, ``InitRole``, ``Adapter``,
``linear_like``) load on first use, so a
plugin that touches them only inside ``build`` (or in a module ``build`` imports) keeps
``blockspec list`` fast.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

from blockspec.assembly.context import BuildContext, LayerParts
from blockspec.assembly.active import ActiveParameters
from blockspec.errors import ContextLengthError, FieldError
from blockspec.registry.hookspecs import API_VERSION, Build, Config, Register, hookimpl
from blockspec.spec.schema import ModelConfig
from blockspec.spec.validators import OMIT_DEFAULT, at_least, greater_than, in_range, one_of, positive, sized_by

if TYPE_CHECKING:
    from blockspec.assembly.initialisation import InitRole, declare_init
    from blockspec.modules.activation import Activation
    from blockspec.modules.adapter import Adapter, linear_like
    from blockspec.modules.attention import CausalSelfAttention, causal_mask
    from blockspec.modules.feed_forward import FeedForward
    from blockspec.modules.norms import OffsetRMSNorm
    from blockspec.modules.blocks import PostNormBlock, PreNormBlock, attend
    from blockspec.modules.kv_cache import CacheLayout, KVCache, LayerCache
    from blockspec.modules.positional import (PositionalEncoding, Start, embed_at, positions, rotate_at,
                                              score_bias_at)
    from blockspec.modules.taps import tap, tapping

_TORCH_NAMES = {  # name -> the internal module that defines it; imported on first use
    "Activation": "blockspec.modules.activation",
    "CausalSelfAttention": "blockspec.modules.attention",
    "causal_mask": "blockspec.modules.attention",
    "FeedForward": "blockspec.modules.feed_forward",
    "OffsetRMSNorm": "blockspec.modules.norms",
    "PositionalEncoding": "blockspec.modules.positional",
    "Start": "blockspec.modules.positional",
    "positions": "blockspec.modules.positional",
    "embed_at": "blockspec.modules.positional",
    "rotate_at": "blockspec.modules.positional",
    "score_bias_at": "blockspec.modules.positional",
    "KVCache": "blockspec.modules.kv_cache",
    "LayerCache": "blockspec.modules.kv_cache",
    "CacheLayout": "blockspec.modules.kv_cache",
    "tap": "blockspec.modules.taps",
    "attend": "blockspec.modules.blocks",
    "PreNormBlock": "blockspec.modules.blocks",
    "PostNormBlock": "blockspec.modules.blocks",
    "tapping": "blockspec.modules.taps",
    "declare_init": "blockspec.assembly.initialisation",
    "Adapter": "blockspec.modules.adapter",
    "linear_like": "blockspec.modules.adapter",
    "InitRole": "blockspec.assembly.initialisation",
}


def __getattr__(name: str) -> object:
    if name in _TORCH_NAMES:
        return getattr(import_module(_TORCH_NAMES[name]), name)
    raise AttributeError(f"module 'blockspec.plugin' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)


__all__ = [
    "API_VERSION",
    "OMIT_DEFAULT",
    "ActiveParameters",
    "Activation",
    "Adapter",
    "Build",
    "BuildContext",
    "CacheLayout",
    "CausalSelfAttention",
    "Config",
    "LayerParts",
    "ContextLengthError",
    "FeedForward",
    "FieldError",
    "InitRole",
    "KVCache",
    "LayerCache",
    "ModelConfig",
    "OffsetRMSNorm",
    "PositionalEncoding",
    "PostNormBlock",
    "PreNormBlock",
    "Register",
    "Start",
    "at_least",
    "attend",
    "causal_mask",
    "declare_init",
    "embed_at",
    "greater_than",
    "hookimpl",
    "in_range",
    "linear_like",
    "one_of",
    "positions",
    "positive",
    "rotate_at",
    "score_bias_at",
    "sized_by",
    "tap",
    "tapping",
]
