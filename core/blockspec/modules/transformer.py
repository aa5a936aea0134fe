"""The assembled model: embedding, positions, L blocks, final norm, head."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, ClassVar

import torch
from torch import nn

from blockspec.errors import TokenIdError
from blockspec.modules.dropout import dropped
from blockspec.modules.token_ids import check_token_ids
from blockspec.modules.positional import PositionalEncoding, Start, embed_at
from blockspec.modules.taps import tap, tapping

if TYPE_CHECKING:
    from blockspec.modules.kv_cache import KVCache
    from blockspec.registry.components import Component
    from blockspec.spec.schema import ModelSpec


class Transformer(nn.Module):
    """Token ids (B, N) -> head output; every tensor in between is (B, N, d_model)."""

    tap_ops: ClassVar[dict[str, str]] = {
        "tokens": "input token ids",
        "embedding": "E[ids]: rows of the token embedding",
        "embedding.scaled": "E[ids]·scale: the embeddings times [model] embedding_scale",
        "positional.encoding": "{positional}: p[pos], the position vectors",
        "positional.embed": "{positional}: x + p[pos]",
        "final_norm": "{final_norm}(x): final norm",
    }

    def __init__(
        self,
        *,
        embedding: nn.Embedding,
        positional: PositionalEncoding,
        blocks: list[nn.Module],
        final_norm: nn.Module,
        head: nn.Module,
        dropout: float = 0.0,
        embedding_scale: float | None = None,
        spec: ModelSpec | None = None,
        provenance: Mapping[str, Component] | None = None,
        layer_positional: Mapping[int, PositionalEncoding] | None = None,
    ) -> None:
        """``spec``: what the model was built from; ``provenance``: module path -> the registry component
        that built it (checkpoints lock versions from it). The assembler passes both.
        ``embedding_scale``: what the token embeddings are multiplied by (Gemma: sqrt(d_model), rounded to the
        activations' dtype as Gemma does); None: not scaled.
        ``layer_positional``: layer -> the encoder its attention uses instead of ``positional`` (Gemma 3's
        local layers rotate with another RoPE base); never additive: positions are added once, to the embeddings."""
        super().__init__()
        self.embedding = embedding
        self.positional = positional
        varied = dict(layer_positional or {})
        if varied:  # registered only when used, so other models' module trees and state dicts stay as they were
            self.layer_positional = nn.ModuleDict({str(i): p for i, p in varied.items()})
        self.block_positionals = tuple(varied.get(i, positional) for i in range(len(blocks)))
        self.positionals = tuple({id(p): p for p in (positional, *varied.values())}.values())  # each once
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(blocks)
        self.final_norm = final_norm
        self.head = head
        self.embedding_scale = embedding_scale
        self.spec = spec
        self.provenance: dict[str, Component] = dict(provenance or {})
        self.adapted: dict[str, Component] = {}  # module path -> the adapter wrapping it ([[adapters]]; assembly)
        # the base checkpoint adapters were trained over (a checkpoint.base_ref.BaseReference): save then writes
        # the adapters alone; None for a model saved whole
        self.base: object | None = None
        # Hugging Face files the model came with (config.json, tokenizer files), by name: save and export_hf
        # write them back, so a model read from a source keeps them wherever it goes.
        self.carried: dict[str, bytes] = {}

    def forward(self, ids: torch.Tensor, *, start: Start = 0, cache: KVCache | None = None,
                last_only: bool = False, features_only: bool = False) -> torch.Tensor:
        """ids (B, N) at positions start..start+N-1 -> logits (B, N, |V|) or the head's output.

        With a ``cache`` the keys and values of positions 0..start-1 come from it, and
        this call's are stored into it, so a decoding step passes only the new token. A cache made with
        ``padding`` holds a left-padded ragged batch: ``start`` is then the slot all rows share, and each
        row's positions are the slot minus its padding (``KVCache.positions``).
        ``last_only`` applies the head to the last position alone, (B, 1, |V|): what sampling
        needs, and for a long prompt the head is a large share of the work. Only for heads
        that work position by position (those that promise "lm"). ``features_only`` stops before the head:
        the final norm's output (B, N, d), which a caller applies the head to in pieces (scoring a long
        text need never hold all of its logits).

        ``ids`` must be an integer tensor (torch.long or torch.int32; float ids are an ``InputError``
        naming the dtype) and 2-D: a single sequence (N,) is an ``InputError`` asking for ``ids[None]``,
        as in nanoGPT (no silent reshaping: the output's shape always follows the input's).
        An id outside 0..|V|-1 is a ``TokenIdError`` (also an ``IndexError``) naming it (``_embed``).

        ``start`` a 0-d long tensor with a ``StaticKVCache``: a step that graph-captures. Its length and room
        checks would read the slot on the host, so the caller makes them once for the whole request
        (``generation.static_decode``), and ``cache.length`` is not kept.
        """
        check_token_ids(ids)
        captured = isinstance(start, torch.Tensor) and cache is not None and cache.static  # a graph-captured step
        if not captured:  # a tensor start otherwise (the ragged tests) is compared on the host, as it was
            self._check_room(start, ids.shape[-1], cache)  # type: ignore[arg-type]
        x = tap(self, "embedding", self._embed(tap(self, "tokens", ids)))  # (B, N, d)
        if self.embedding_scale is not None:
            x = tap(self, "embedding.scaled", x * torch.tensor(self.embedding_scale, dtype=x.dtype))  # (B, N, d)
        if self.positional.adds:
            at = start if cache is None else cache.positions(start)  # a ragged batch's rows: (B, 1)
            if tapping():
                zeros = torch.zeros_like(x if isinstance(at, torch.Tensor) else x[:1])
                tap(self, "positional.encoding", embed_at(self.positional, zeros, at).expand_as(x))
            x = tap(self, "positional.embed", embed_at(self.positional, x, at))
        x = dropped(self.drop, x)
        if cache is None:
            for block, positional in zip(self.blocks, self.block_positionals):
                x = block(x, positional, start)
        else:  # blocks see a cache argument only when there is one: cache-less custom blocks keep working
            for block, positional, layer_cache in zip(self.blocks, self.block_positionals, cache.layers, strict=True):
                x = block(x, positional, start, layer_cache)
            if not captured:
                cache.length = start + ids.shape[-1]  # type: ignore[assignment]  # a tensor start: as before
        x = tap(self, "final_norm", self.final_norm(x))
        if features_only:
            return x
        if last_only:
            x = x[:, -1:]  # (B, 1, d)
        return self.head(x)

    def _check_room(self, start: int, n_tokens: int, cache: KVCache | None) -> None:
        """Before any kernel: positions start..start+n_tokens-1 fit every encoder and the cache."""
        for positional in self.positionals:
            positional.check_length(start + n_tokens)
        if cache is not None:
            cache.check_room(start, n_tokens)

    def _embed(self, ids: torch.Tensor) -> torch.Tensor:
        """The token embedding, (B, N) -> (B, N, d); an id outside the vocabulary is a TokenIdError naming it.

        On the CPU the embedding refuses such an id itself, so the ids are examined only then, at no
        cost to a valid batch (a check up front cost ~40 µs of a ~0.8 ms small-model forward). On an
        accelerator a bad id would end in a device-side assert, so the check runs first there.
        """
        if torch.compiler.is_compiling():  # compiled graphs stay whole
            return self.embedding(ids)
        if ids.device.type != "cpu":
            self._check_ids(ids)
            return self.embedding(ids)
        try:
            return self.embedding(ids)
        except IndexError:
            self._check_ids(ids)  # names the id; re-raise whatever else the embedding meant
            raise

    def _check_ids(self, ids: torch.Tensor) -> None:
        if ids.is_meta or ids.numel() == 0:
            return  # compiled graphs stay whole; meta tensors hold no values
        vocab_size = self.embedding.num_embeddings
        low, high = (value.item() for value in torch.aminmax(ids))  # one fused reduction
        if low < 0 or high >= vocab_size:
            bad = low if low < 0 else high
            raise TokenIdError(f"token id {bad} is outside the vocabulary: ids must lie in 0..{vocab_size - 1} "
                               f"(vocab_size {vocab_size})")
