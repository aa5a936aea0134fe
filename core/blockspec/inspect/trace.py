"""Follow one input through an assembled model: every stage, named, with its shape and maker.

The tracer walks the model itself, calling the model's own submodules in the order
``Transformer.forward`` does (embedding, positional.embed, per block the norms,
attn.project / weights / attend / proj, block.drop, ffn.up / act / down, final_norm,
head). So it needs no hooks: nothing is left on the model and an untraced forward pass
costs exactly what it did. Because it only uses the kind interfaces, third-party
positional encoders, norms, activations and heads are traced like the built-in ones.

Shapes: ``Stage.tensor`` keeps the batch dimension, ``Stage.shape`` drops it, so the
shapes read as the chapter writes them ([N, d], [h, N, N], [N, |V|]).

A block, attention or FFN class whose ``forward`` the tracer does not know (not
PreNormBlock / PostNormBlock / CausalSelfAttention / FeedForward, or a subclass that
overrides ``forward``) becomes one stage for the whole module, called as the model would.
"""

from __future__ import annotations

import fnmatch
import sys
import types
from collections.abc import Iterator

import torch
from attrs import field, frozen
from torch import nn

from blockspec.errors import BlockspecError
from blockspec.modules.attention import CausalSelfAttention
from blockspec.modules.blocks import PostNormBlock, PreNormBlock
from blockspec.modules.feed_forward import FeedForward
from blockspec.modules.positional import PositionalEncoding
from blockspec.modules.transformer import Transformer

POSITIONS = "7.1 positions"
RESIDUAL = "7.2 residual"
NORM = "7.3 LayerNorm"
FFN = "7.4 FFN"
OUTPUT = "7.5 output layer"
MODEL = "7.6 the full model"
SECTIONS = (POSITIONS, RESIDUAL, NORM, FFN, OUTPUT, MODEL)

CORE = "blockspec"  # the distribution that supplies the embedding, FFN linears and residual adds
_NO_POSITIONS = PositionalEncoding()  # identity on every hook: q, k before rotation


class TraceError(BlockspecError, ValueError):
    """The model or the input cannot be traced."""


@frozen(kw_only=True)
class Stage:
    """One tensor of the forward pass and where it came from."""

    name: str  # stable dotted name, e.g. "blocks.1.attn.weights"
    tensor: torch.Tensor = field(eq=False, repr=False)  # (B, ...) as computed
    op: str  # the operation that made it
    component: str | None = None  # "kind:name" of the registry component, None for core modules
    distribution: str | None = None  # who supplied it ("blockspec" for the core)
    section: str = MODEL  # the chapter section that teaches it

    @property
    def shape(self) -> tuple[int, ...]:
        """The shape without the batch dimension: (N, d), (h, N, N), ..."""
        return tuple(self.tensor.shape[1:])


@frozen
class Trace:
    """The ordered stages of one forward pass."""

    stages: tuple[Stage, ...]

    def __iter__(self) -> Iterator[Stage]:
        return iter(self.stages)

    def __len__(self) -> int:
        return len(self.stages)

    def __getitem__(self, name: str) -> Stage:
        for stage in self.stages:
            if stage.name == name:
                return stage
        raise TraceError(f"no stage named {name!r}; stages are {', '.join(self.names())}")

    def names(self) -> list[str]:
        return [stage.name for stage in self.stages]

    def select(self, pattern: str) -> dict[str, torch.Tensor]:
        """fnmatch-style selection, in stage order: ``select("blocks.*.attn.weights")``."""
        return {s.name: s.tensor for s in self.stages if fnmatch.fnmatchcase(s.name, pattern)}

    @property
    def output(self) -> torch.Tensor:
        """What the model returns: the head's output (the logits of an LM head)."""
        names = self.names()
        return self.stages[names.index("logits" if "logits" in names else "head")].tensor


def trace(model: Transformer, ids: torch.Tensor, *, start: int = 0) -> Trace:
    """Run ids (B, N) through ``model`` stage by stage; the output equals ``model(ids, start=start)``.

    Runs under ``torch.no_grad`` and leaves the model as it was (mode, parameters, hooks).
    """
    if type(model).forward is not Transformer.forward:
        raise TraceError(f"trace follows blockspec's Transformer.forward; {type(model).__name__} overrides it")
    if ids.dim() != 2:
        raise TraceError(f"ids: expected token ids of shape (B, N), found shape {tuple(ids.shape)}")
    tracer = _Tracer(model)
    with torch.no_grad():
        tracer.run(ids, start)
    return Trace(tuple(tracer.stages))


class _Tracer:
    """Replays Transformer.forward one submodule call at a time, recording each result."""

    def __init__(self, model: Transformer) -> None:
        self.model = model
        self.positional = model.positional
        self.stages: list[Stage] = []

    def add(self, name: str, tensor: torch.Tensor, op: str, section: str, source: str | None = CORE) -> torch.Tensor:
        """Record a stage; ``source`` is a provenance path, CORE, or None when unknown."""
        component = self.model.provenance.get(source) if source not in (None, CORE) else None
        self.stages.append(Stage(
            name=name, tensor=tensor.detach(), op=op, section=section,
            component=f"{component.kind}:{component.name}" if component else None,
            distribution=component.distribution if component else (CORE if source == CORE else None),
        ))
        return tensor

    def run(self, ids: torch.Tensor, start: int) -> None:
        model = self.model
        self.positional.check_length(start + ids.shape[-1])
        self.add("tokens", ids, "input token ids", MODEL)
        x = self.add("embedding", model.embedding(ids), "E[ids]: rows of the token embedding", MODEL)
        if self.positional.adds:
            x = self.positions_added(x, start)
        x = model.drop(x)
        for index, block in enumerate(model.blocks):
            x = self.block(f"blocks.{index}", block, x, start)
        if not isinstance(model.final_norm, nn.Identity):
            x = self.add("final_norm", model.final_norm(x), f"{_name(model.final_norm)}(x): final norm",
                         NORM, "final_norm")
        self.output(x)

    def positions_added(self, x: torch.Tensor, start: int) -> torch.Tensor:
        positional, kind = self.positional, _name(self.positional)
        signal = positional.embed(torch.zeros_like(x[:1]), start)  # (1, N, d): what embed adds
        self.add("positional.encoding", signal.expand_as(x), f"{kind}: p[pos], the position vectors",
                 POSITIONS, "positional")
        return self.add("positional.embed", positional.embed(x, start), f"{kind}: x + p[pos]",
                        POSITIONS, "positional")

    def output(self, x: torch.Tensor) -> None:
        head = self.model.head
        out = head(x)
        is_lm = out.dim() == 3 and out.shape[-1] == self.model.embedding.num_embeddings
        name, what = ("logits", "logits over the vocabulary") if is_lm else ("head", "head output")
        self.add(name, out, f"{_name(head)}(x): {what}", OUTPUT, "head")
        self.add("probs", out.float().softmax(dim=-1), "softmax: next-token probabilities" if is_lm
                 else "softmax over the head's outputs", OUTPUT)

    def block(self, prefix: str, block: nn.Module, x: torch.Tensor, start: int) -> torch.Tensor:
        forward = type(block).forward
        if forward is PreNormBlock.forward:
            return self.pre_norm(prefix, block, x, start)
        if forward is PostNormBlock.forward:
            return self.post_norm(prefix, block, x, start)
        return self.add(prefix, block(x, self.positional, start), f"{_name(block)}: whole block (not traced inside)",
                        MODEL, None)

    def pre_norm(self, p: str, block: PreNormBlock, x: torch.Tensor, start: int) -> torch.Tensor:
        """x + drop(attn(norm1(x))), then x + drop(ffn(norm2(x)))."""
        h = self.add(f"{p}.norm1", block.norm1(x), f"{_name(block.norm1)}(x): attention input norm",
                     NORM, f"{p}.norm1")
        a = self.attention(f"{p}.attn", block.attn, h, start)
        x = self.add(f"{p}.attn_residual", x + block.drop(a), "x + attn(norm1(x)): residual add", RESIDUAL)
        h = self.add(f"{p}.norm2", block.norm2(x), f"{_name(block.norm2)}(x): FFN input norm", NORM, f"{p}.norm2")
        f = self.ffn(f"{p}.ffn", block.ffn, h)
        return self.add(f"{p}.ffn_residual", x + block.drop(f), "x + ffn(norm2(x)): residual add", RESIDUAL)

    def post_norm(self, p: str, block: PostNormBlock, x: torch.Tensor, start: int) -> torch.Tensor:
        """norm1(x + drop(attn(x))), then norm2(x + drop(ffn(x))): add & norm."""
        a = self.attention(f"{p}.attn", block.attn, x, start)
        s = self.add(f"{p}.attn_residual", x + block.drop(a), "x + attn(x): residual add", RESIDUAL)
        x = self.add(f"{p}.norm1", block.norm1(s), f"{_name(block.norm1)}: add & norm after attention",
                     NORM, f"{p}.norm1")
        f = self.ffn(f"{p}.ffn", block.ffn, x)
        s = self.add(f"{p}.ffn_residual", x + block.drop(f), "x + ffn(x): residual add", RESIDUAL)
        return self.add(f"{p}.norm2", block.norm2(s), f"{_name(block.norm2)}: add & norm after the FFN",
                        NORM, f"{p}.norm2")

    def attention(self, p: str, attn: nn.Module, x: torch.Tensor, start: int) -> torch.Tensor:
        if type(attn).forward is not CausalSelfAttention.forward:
            return self.add(p, attn(x, self.positional, start), f"{_name(attn)}: whole attention (not traced inside)",
                            MODEL, p)
        q, k, v = attn.project(x, self.positional, start)
        self.projections(p, attn, x, (q, k, v), start)
        bias = self.positional.score_bias(q.shape[-2], k.shape[-2], start) if self.positional.biases else None
        if bias is not None:
            self.add(f"{p}.score_bias", _batched(bias, x.shape[0]), f"{_name(self.positional)}: score bias",
                     POSITIONS, "positional")
        self.add(f"{p}.weights", attn.weights(q, k, bias), "softmax(q·kᵀ/√hs + causal mask): weights per head",
                 MODEL, p)
        y = self.add(f"{p}.heads", attn.attend(q, k, v, bias), "weights @ v, per head (SDPA)", MODEL, p)
        batch, n_tokens = x.shape[:2]
        y = y.transpose(1, 2).reshape(batch, n_tokens, -1)  # (B, N, d)
        return self.add(f"{p}.out", attn.proj(y), "proj(concat(heads)): attention output", MODEL, p)

    def projections(self, p: str, attn: CausalSelfAttention, x: torch.Tensor, qkv: tuple, start: int) -> None:
        """q, k, v per head; for rotary encoders also q, k before rotation (an extra qkv, for display)."""
        q, k, v = qkv
        rotates = self.positional.rotates
        plain_q, plain_k = attn.project(x, _NO_POSITIONS, start)[:2] if rotates else (q, k)
        self.add(f"{p}.q", plain_q, "qkv(x): queries, split into heads", MODEL, p)
        self.add(f"{p}.k", plain_k, "qkv(x): keys, split into kv heads", MODEL, p)
        self.add(f"{p}.v", v, "qkv(x): values, split into kv heads", MODEL, p)
        if rotates:
            kind = _name(self.positional)
            self.add(f"{p}.q_rotated", q, f"{kind}: q rotated by position", POSITIONS, "positional")
            self.add(f"{p}.k_rotated", k, f"{kind}: k rotated by position", POSITIONS, "positional")

    def ffn(self, p: str, ffn: nn.Module, x: torch.Tensor) -> torch.Tensor:
        if type(ffn).forward is not FeedForward.forward:
            return self.add(p, ffn(x), f"{_name(ffn)}: whole FFN (not traced inside)", FFN, None)
        u = self.add(f"{p}.up", ffn.up(x), f"up(x): d -> {ffn.up.out_features}", FFN)
        h = self.add(f"{p}.act", ffn.act(u), f"{_name(ffn.act)}: FFN hidden", FFN, f"{p}.act")
        return self.add(f"{p}.down", ffn.down(h), f"down(h): {ffn.down.in_features} -> d", FFN)


def _name(module: nn.Module) -> str:
    return type(module).__name__


def _batched(bias: torch.Tensor, batch: int) -> torch.Tensor:
    """A score bias (h, N, N) or broadcastable -> (B, h, N, N) view, so its shape reads like the others."""
    bias = bias if bias.dim() == 4 else bias.reshape(1, *([1] * (3 - bias.dim())), *bias.shape)  # (1, h, N, N)
    return bias.expand(batch, *bias.shape[1:])  # (B, h, N, N)


class _CallableModule(types.ModuleType):
    """Lets ``blockspec.trace(model, ids)`` work although ``blockspec.inspect.trace`` is also this module's name.

    Python binds a package attribute to its submodule once the submodule is imported, so
    the function alone could not keep the name; calling the module calls the function.
    """

    def __call__(self, model: Transformer, ids: torch.Tensor, *, start: int = 0) -> Trace:
        return trace(model, ids, start=start)


sys.modules[__name__].__class__ = _CallableModule
