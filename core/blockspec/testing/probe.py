"""Shape-contract probes: build a component at tiny sizes on the CPU and check what its kind promises.

Probing imports torch (about a second), so the loader runs it only when asked: ``blockspec doctor``,
strict mode (``BLOCKSPEC_STRICT_PLUGINS=1``) or ``load_registry(probe=True)``. Never on ``list``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from blockspec.assembly.context import BuildContext
from blockspec.registry.components import Component
from blockspec.spec.schema import ModelConfig

PROBE_MODEL = ModelConfig(name="probe", vocab_size=11, context_length=8, d_model=8, n_layers=1, n_heads=2, d_ff=12)
BATCH, TOKENS = 2, 5


class ContractError(Exception):
    """A component's module does not keep its kind's shape contract."""


def probe(component: Component) -> str | None:
    """None when the contract holds; a reason when it could not be checked; ContractError when broken.

    A build that raises ValueError or TypeError declines the probe's sizes (the documented way to
    refuse a config), which is not a breach. Any other exception from build or forward is.
    """
    try:
        config = component.config_cls()
    except (TypeError, ValueError) as error:
        return f"its config needs values the probe cannot guess ({_first_line(error)})"
    import torch

    with torch.random.fork_rng(devices=[]), torch.no_grad(), torch.device("cpu"):
        torch.manual_seed(0)
        ctx = BuildContext(model=PROBE_MODEL, embedding=torch.nn.Embedding(PROBE_MODEL.vocab_size, PROBE_MODEL.d_model))
        try:
            module = component.build(config, ctx)
        except (TypeError, ValueError) as error:
            return f"it declined the probe sizes ({_first_line(error)})"
        if not isinstance(module, torch.nn.Module):
            raise ContractError(f"build returned {type(module).__name__}, not an nn.Module")
        _CHECKS[component.kind](module, component)
    return None


def _tokens(width: int):
    import torch

    return torch.randn(BATCH, TOKENS, width)  # (B, N, width)


def _expect(what: str, found: Any, shape: tuple[int, ...]) -> None:
    import torch

    if not isinstance(found, torch.Tensor):
        raise ContractError(f"{what} returned {type(found).__name__}, expected a tensor of shape {shape}")
    if tuple(found.shape) != shape:
        raise ContractError(f"{what} gave shape {tuple(found.shape)}, expected {shape}")


def _norm(module, component: Component) -> None:
    d = PROBE_MODEL.d_model
    _expect("forward (B, N, d)", module(_tokens(d)), (BATCH, TOKENS, d))


def _activation(module, component: Component) -> None:
    gated = bool(getattr(module, "gated", False))
    if ("gated" in component.promises) != gated:
        raise ContractError(f"promises {sorted(component.promises)} but module.gated is {gated}")
    d_ff = PROBE_MODEL.d_ff
    width = 2 * d_ff if gated else d_ff
    _expect(f"forward (B, N, {width})", module(_tokens(width)), (BATCH, TOKENS, d_ff))


def _positional(module, component: Component) -> None:
    import torch

    from blockspec.modules.positional import PositionalEncoding

    if not isinstance(module, PositionalEncoding):
        raise ContractError(f"{type(module).__name__} does not subclass PositionalEncoding")
    d, heads, head_dim = PROBE_MODEL.d_model, PROBE_MODEL.n_heads, PROBE_MODEL.head_dim
    if module.adds:
        _expect("embed (B, N, d)", module.embed(_tokens(d), 0), (BATCH, TOKENS, d))
    if module.rotates:
        q = torch.randn(BATCH, heads, TOKENS, head_dim)  # (B, h, N, hs)
        rotated = module.rotate(q, q.clone(), 0)
        for name, tensor in zip(("q", "k"), rotated):
            _expect(f"rotate ({name})", tensor, tuple(q.shape))
    if module.biases:
        bias = module.score_bias(TOKENS, TOKENS, 0)
        scores = (BATCH, heads, TOKENS, TOKENS)
        if not isinstance(bias, torch.Tensor) or torch.broadcast_shapes(bias.shape, scores) != scores:
            raise ContractError(f"score_bias gave {getattr(bias, 'shape', bias)}, not broadcastable to {scores}")


def _head(module, component: Component) -> None:
    out = module(_tokens(PROBE_MODEL.d_model))
    logits = (BATCH, TOKENS, PROBE_MODEL.vocab_size)
    if "lm" in component.promises:
        _expect("forward (B, N, d) -> logits", out, logits)
    elif "classifier" in component.promises:
        _expect("forward (B, N, d) -> classes", out, (BATCH, getattr(out, "shape", (0, 0))[-1]))
    elif tuple(getattr(out, "shape", ())) != logits and getattr(out, "ndim", 0) != 2:
        raise ContractError(f"forward gave {getattr(out, 'shape', type(out).__name__)}, expected {logits} or (B, C)")


def _attention(module, component: Component) -> None:
    from blockspec.modules.positional import PositionalEncoding

    d = PROBE_MODEL.d_model
    _expect("forward (B, N, d)", module(_tokens(d), PositionalEncoding(), 0), (BATCH, TOKENS, d))


_CHECKS: dict[str, Callable[[Any, Component], None]] = {
    "positional": _positional, "norm": _norm, "activation": _activation, "head": _head, "attention": _attention,
}


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
