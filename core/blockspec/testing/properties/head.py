"""Heads: logits token by token (lm), the embedding's own storage (tied), one row per sequence (classifier)."""

from __future__ import annotations

import torch

from blockspec.registry.components import Component
from blockspec.testing.cases import Case
from blockspec.testing.harness import assume, exercise, normal
from blockspec.testing.properties.base import (
    LEAK_DTYPES, Property, assert_like, assert_shape, assert_unchanged, promised_option, sequence_cases,
)


def check_contract(component: Component, case: Case, device: str) -> None:
    """lm: (B, N, d) -> (B, N, |V|); classifier: (B, C) with C the same for every length."""
    built, (x,), found = exercise(component, case, device)
    out, b, n = found["output"], case.batch, case.tokens
    assert_like(out, x, "head output")
    if "lm" in component.promises:
        assert_shape(out, (b, n, case.model.vocab_size), "lm head logits")
    elif "classifier" in component.promises:
        _check_classifier(built.module, out, case, device)
    elif out.shape[:1] != (b,):
        raise AssertionError(f"head output {tuple(out.shape)} does not start with the batch size {b}")


def _check_classifier(module: torch.nn.Module, out: torch.Tensor, case: Case, device: str) -> None:
    if out.dim() != 2 or out.shape[0] != case.batch:
        raise AssertionError(f"classifier output: expected (B={case.batch}, C), found {tuple(out.shape)}")
    longer = normal(case, case.batch, case.tokens + 1, case.model.d_model, offset=9, device=device)
    with torch.no_grad():
        other = module(longer)
    assert_shape(other, tuple(out.shape), f"classifier output for {case.tokens + 1} tokens")


def check_positionwise(component: Component, case: Case, device: str) -> None:
    """Logits at position i depend on the hidden state at i only: changing later tokens changes nothing up to i
    (float64, trained weights)."""
    built, (x,), found = exercise(component, case, device)
    changed = x.clone()
    tail = normal(case, case.batch, case.tokens, case.model.d_model, offset=11, device=device)
    changed[:, case.cut + 1:] = tail[:, case.cut + 1:]  # (B, N, d): positions after cut replaced
    with torch.no_grad():
        out = built.module(changed)
    keep = case.cut + 1
    assert_unchanged(out[:, :keep], found["output"][:, :keep],
                     f"logits at positions 0..{case.cut} after changing positions {keep}..")


def ties(component: Component, case: Case) -> bool:
    """Tied always when 'tied' is promised; with 'tie_option', as the promised option says."""
    if "tied" in component.promises:
        return True
    return "tie_option" in component.promises and promised_option(component, case, "tie_option") is True


def _tying_promised(component: Component) -> bool:
    """promises neither 'tied' nor 'tie_option'"""
    return bool({"tied", "tie_option"} & component.promises)


def check_tied(component: Component, case: Case, device: str) -> None:
    """Tied: the head holds the embedding's matrix itself (same storage). Untied: its own copy."""
    built, (x,), found = exercise(component, case, device)
    weight = built.embedding.weight
    shared = [name for name, p in built.module.named_parameters() if p.data_ptr() == weight.data_ptr()]
    if not ties(component, case):
        if shared:
            raise AssertionError(f"configured untied, but {shared} share storage with the token embedding")
        return
    if not shared:
        raise AssertionError("no parameter of the head shares storage with the token embedding's weight")
    with torch.no_grad():
        weight.mul_(2.0)
        after = built.module(x)
    if torch.equal(after, found["output"]):
        raise AssertionError("doubling the embedding matrix left the logits unchanged")


def check_logit_softcap(component: Component, case: Case, device: str) -> None:
    """With logit_softcap c: no logit exceeds c in magnitude, however large the input."""
    cap = promised_option(component, case, "logit_softcap")
    assume(cap is not None, "the config caps no logits")
    built, (x,), _ = exercise(component, case, device)
    with torch.no_grad():
        logits = built.module(100.0 * case.factor * x).double()
    worst = logits.abs().max().item()
    assert worst <= cap * (1 + 1e-6), f"a logit of magnitude {worst:.6g} exceeds the cap {cap:g}"


def check_logit_columns(component: Component, case: Case, device: str) -> None:
    """logit_columns(x, begin, end) equals forward(x)[..., begin:end]: the whole vocabulary, its first and its
    last token alone, and two slices that tile it at a drawn cut (float64, trained weights)."""
    built, (x,), found = exercise(component, case, device)
    vocab, logits = case.model.vocab_size, found["output"]
    cut = 1 + case.start % max(vocab - 1, 1)  # 1 .. vocab - 1
    slices = {(0, vocab), (0, 1), (vocab - 1, vocab), (0, min(cut, vocab)), (min(cut, vocab - 1), vocab)}
    for begin, end in sorted(slices):
        with torch.no_grad():
            columns = built.module.logit_columns(x, begin, end)
        assert_unchanged(columns, logits[..., begin:end], f"logit_columns(x, {begin}, {end}) against forward(x)")


HEAD = (
    Property(name="contract", kind="head", check=check_contract,
             summary="lm: (B, N, |V|); classifier: (B, C); dtype and device kept"),
    Property(name="positionwise", cases=sequence_cases, kind="head", promise="lm", check=check_positionwise,
             weights="trained", dtypes=LEAK_DTYPES,
             summary="logits at i see only position i (no future leak)"),
    Property(name="tied", kind="head", when=_tying_promised, check=check_tied,
             summary="tied (promised, or tie_option on) shares the embedding's storage; untied does not"),
    Property(name="logit_softcap", kind="head", promise="logit_softcap", check=check_logit_softcap,
             summary="with logit_softcap c: no logit exceeds c"),
    Property(name="logit_columns", kind="head", promise="logit_columns", check=check_logit_columns,
             weights="trained", dtypes=LEAK_DTYPES,
             summary="logit_columns(x, begin, end) is forward(x)[..., begin:end]"),
)
