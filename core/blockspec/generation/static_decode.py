"""A decode step of fixed shapes, which ``torch.compile(fullgraph=True)`` captures whole: ``StaticDecoder``.

The cached loop of ``generation.tokens`` reads a growing slice of the cache and an int position, so each
step is a new graph. Here the cache has fixed shapes (``StaticKVCache``) and the slot is a 0-d tensor, so
one graph serves every step: on CUDA ``mode="reduce-overhead"`` replays it as a CUDA graph, without a
kernel launch from Python per op. Sampling stays outside the graph, with the caller; the request is
checked once, up front, since a captured step cannot check positions on the host.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode

from blockspec.errors import ContextLengthError, InputError, Problem
from blockspec.modules.attention import CausalSelfAttention
from blockspec.modules.positional import PositionalEncoding
from blockspec.modules.static_cache import StaticKVCache
from blockspec.modules.transformer import Transformer

__all__ = ["StaticDecoder", "check_static", "greedy"]

# what fullgraph raises where a component cannot be traced whole: a graph break, a shape that depends on values
GRAPH_BREAKS = (torch._dynamo.exc.TorchDynamoException, GuardOnDataDependentSymNode)
Backend = str | Callable[..., object]  # torch.compile's backend: a name ("inductor", "aot_eager") or a callable


class StaticDecoder:
    """A ``StaticKVCache`` for ``batch_size`` rows of up to ``max_length`` slots, and the step that fills it.

    ``padding``: each row's left padding (B,), as ``KVCache`` takes it (``generation.ragged.pack``).
    ``compile``: ``step`` is ``torch.compile(fullgraph=True)``d (a graph break raises), with CUDA graphs
    (``mode="reduce-overhead"``) on CUDA under the default backend; ``backend`` picks another (tests use
    ``"aot_eager"``). Eager, the same step runs uncompiled: the same tokens, a reference for the compiled one.
    """

    def __init__(self, model: Transformer, *, batch_size: int, max_length: int, padding: torch.Tensor | None = None,
                 compile: bool = False, backend: Backend | None = None) -> None:
        check_static(model, max_length)
        self.model = model
        self.max_length = max_length
        self.cache = StaticKVCache.for_model(model, batch_size=batch_size, max_length=max_length, padding=padding)
        self.graphs = compile and backend in (None, "inductor") and self.cache.buffers()[0].device.type == "cuda"
        self._step = _compiled(self._forward, self.cache, backend, self.graphs) if compile else self._forward

    def prefill(self, ids: torch.Tensor, *, last_only: bool = False) -> torch.Tensor:
        """ids (B, N), the (left-padded) prompts at slots 0..N-1 -> the last slot's logits (B, |V|), eager.

        ``last_only``: the model's head works position by position (an "lm" head), so only the last runs."""
        self.cache.check_room(0, ids.shape[-1])
        return self.model(ids, start=0, cache=self.cache, last_only=last_only)[:, -1]  # (B, N, |V|) -> (B, |V|)

    def step(self, tokens: torch.Tensor, slot: torch.Tensor) -> torch.Tensor:
        """tokens (B, 1) at ``slot`` (a 0-d long tensor on the model's device, below ``max_length``) ->
        logits (B, |V|). Under CUDA graphs the logits are overwritten by the next step: sample before it."""
        if self.graphs:
            torch.compiler.cudagraph_mark_step_begin()
        try:
            return self._step(tokens, slot)
        except GRAPH_BREAKS as error:  # fullgraph: a component that breaks the graph, as one line
            raise InputError(Problem(path="compile", expected="a model whose decode step compiles as one graph",
                                     found=f"a graph break: {_first_lines(error)}",
                                     hint="drop {compile}", names={"compile": "compile=True"})) from error

    def _forward(self, tokens: torch.Tensor, slot: torch.Tensor) -> torch.Tensor:
        return self.model(tokens, start=slot, cache=self.cache)[:, -1]  # (B, 1, |V|) -> (B, |V|)


def _first_lines(error: Exception) -> str:
    """What broke and, when torch says, where ("Caused by: ... file:line in function")."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    caused = [line for line in lines[1:] if line.startswith("Caused by:")]
    return "; ".join(lines[:1] + caused[:1])


def _compiled(step: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], cache: StaticKVCache,
              backend: Backend | None, graphs: bool) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """``step`` compiled whole; the cache's buffers keep fixed addresses, so CUDA graphs may write them in place."""
    for buffer in cache.buffers():
        torch._dynamo.mark_static_address(buffer)
    if graphs:
        return torch.compile(step, fullgraph=True, mode="reduce-overhead")
    return torch.compile(step, fullgraph=True, backend=backend or "inductor")


def check_static(model: Transformer, max_length: int) -> None:
    """Refuse, before any cache is made, what a static step cannot decode: an encoder that needs int
    positions or biases the scores, an attention other than the core's, or positions past a learned table."""
    for path, module in model.named_modules():
        component = model.provenance.get(path)
        name = f"{component.kind} {component.name!r}" if component else type(module).__name__
        if isinstance(module, PositionalEncoding) and not module.tensor_positions:
            _refuse(path or "positional", name, "its hooks take int positions only")
        if isinstance(module, PositionalEncoding) and module.biases:
            _refuse(path or "positional", name, "a score bias, whose keys end where the queries do")
        if component is not None and component.kind == "attention" and type(module) is not CausalSelfAttention:
            _refuse(path, name, "it is not the core's causal attention, the one that reads a static cache's slots")
    limit = model.positional.max_positions
    if limit is not None and max_length > limit:
        raise ContextLengthError(Problem(
            message=f"a compiled decode needs {max_length} positions, but {type(model.positional).__name__} "
                    f"holds positions 0..{limit - 1} (context_length = {limit})",
            hint="ask for fewer tokens, or drop {compile}: the eager loop slides over the last positions",
            names={"compile": "compile=True"}))


def _refuse(path: str, name: str, why: str) -> None:
    raise InputError(Problem(path=path, expected="components a static, compiled decode step supports: "
                             "the core's attention and positional encoders with tensor positions",
                             found=f"{name} ({why})", hint="drop {compile}", names={"compile": "compile=True"}))


def greedy(decoder: StaticDecoder, ids: torch.Tensor, max_new_tokens: int) -> torch.Tensor:
    """ids (B, N) -> the next ``max_new_tokens`` greedy tokens (B, T): the plainest loop over ``step``, for
    checking and timing it (``generation.tokens`` samples with the request's settings)."""
    slots = ids.shape[-1] + max_new_tokens - 1  # the last token is never fed back
    if slots > decoder.max_length:
        raise ContextLengthError(f"{ids.shape[-1]} prompt tokens and {max_new_tokens} new ones need {slots} slots, "
                                 f"but this decoder holds {decoder.max_length} (max_length)")
    token = decoder.prefill(ids).argmax(dim=-1, keepdim=True)  # (B, 1)
    found = [token]
    slot = torch.tensor(ids.shape[-1], device=ids.device)
    for _ in range(max_new_tokens - 1):
        token = decoder.step(token, slot).argmax(dim=-1, keepdim=True)  # (B, 1)
        found.append(token)
        slot = slot + 1
    return torch.cat(found, dim=1)  # T x (B, 1) -> (B, T)
