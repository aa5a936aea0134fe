"""A trace as plain, rounded, down-sampled data for the explorer page.

Every number the page shows comes from here; the page only draws. Large tensors are
sampled with a stride (stated next to each view), so a GPT-2-small trace stays a few MB.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch

from blockspec.modules.transformer import Transformer
from blockspec.inspect.layers import blocks_label
from blockspec.inspect.trace import Stage, Trace
from blockspec.inspect.plots import additive_signal, rotated_width, rotation_angles

MAX_ROWS = 128  # rows of a heatmap (positions)
MAX_COLS = 128  # columns of a heatmap (features, vocabulary ids)
MAX_HEAD_VALUES = 4096  # values kept of a per-head stage (q, k, v, ...): fewer features shown per head
MAX_POSITIONS = 128  # positions in the positional view
MAX_HANDS = 16  # clock hands in the positional view
MAX_NORM_TOKENS = 8  # tokens offered in the normalisation view
MAX_NORM_BARS = 64  # features drawn as bars in the normalisation view
NORM_SCALES = (1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 10.0)
TOP_K = 10
DIGITS = 4  # significant digits kept

COLUMN_AXES = (  # stage-name suffix -> what a heatmap column is
    (("weights", "score_bias"), "key position"),
    (("logits", "probs", "head"), "vocabulary id"),
    (("ffn.up", "ffn.act"), "FFN unit"),
    (("attn.q", "attn.k", "attn.v", "q_rotated", "k_rotated", "attn.heads"), "head feature"),
)


def rounded(values: torch.Tensor) -> list[float | None]:
    """Flat list at DIGITS significant digits; non-finite values become null."""
    return [float(f"{v:.{DIGITS}g}") if math.isfinite(v) else None for v in values.flatten().tolist()]


def stride_index(size: int, limit: int) -> tuple[list[int], int]:
    """Every step-th index so that at most ``limit`` remain; (indices, step)."""
    step = max(1, math.ceil(size / limit))
    return list(range(0, size, step)), step


def explorer_data(model: Transformer, result: Trace, *, ids: Sequence[int], label_of: Callable[[int], str],
                  weights: str, tokenizer: str | None) -> dict[str, Any]:
    """Everything the page shows, as JSON-ready data; ``label_of`` spells a token id for display."""
    labels = [label_of(i) for i in ids]
    spec = model.spec.model if model.spec is not None else None
    return {
        "model": _model_info(model, spec),
        "weights": weights,
        "input": {"ids": list(ids), "tokens": list(labels), "tokenizer": tokenizer},
        "stages": [stage_view(stage, labels) for stage in result.stages],
        "next_token": next_tokens(result, label_of),
        "positional": positional_view(model),
        "norm": norm_view(model, result, labels),
    }


def _model_info(model: Transformer, spec) -> dict[str, Any]:
    info = {"name": spec.name if spec else type(model).__name__}
    if spec:
        info.update(d_model=spec.d_model, n_layers=spec.n_layers, n_heads=spec.n_heads,
                    n_kv_heads=spec.kv_heads, d_ff=spec.d_ff, vocab_size=spec.vocab_size,
                    context_length=spec.context_length, blocks=blocks_label(model))
    info["components"] = {path: f"{c.kind}:{c.name} ({c.distribution} {c.version})"
                          for path, c in model.provenance.items() if not path.startswith("blocks.")
                          or path.startswith("blocks.0.")}
    return info


def column_axis(name: str) -> str:
    for suffixes, axis in COLUMN_AXES:
        if name.endswith(suffixes):
            return axis
    return "position" if name == "tokens" else "feature"


def stage_view(stage: Stage, labels: Sequence[str]) -> dict[str, Any]:
    """A stage as one heatmap per head (or one): rows are positions, columns its last axis."""
    tensor = stage.tensor[0].detach().float().cpu()
    if tensor.dim() == 1:
        tensor = tensor[None]  # (1, N): the token ids as one row
    mats = tensor if tensor.dim() == 3 else tensor[None]  # (H, R, C)
    mats = mats.flatten(0, -3) if mats.dim() > 3 else mats  # (H, R, C) for any leading axes
    rows, row_step = stride_index(mats.shape[1], MAX_ROWS)
    cols, col_step = stride_index(mats.shape[2], _column_limit(stage.name, mats.shape[0], len(rows)))
    sampled = mats[:, rows][:, :, cols]  # (H, r, c)
    return {
        "name": stage.name, "shape": list(stage.shape), "op": stage.op, "component": stage.component,
        "distribution": stage.distribution, "section": stage.section,
        "heads": mats.shape[0] if tensor.dim() == 3 else 0,
        "rows": rows, "cols": cols, "row_axis": "input" if stage.name == "tokens" else _row_axis(stage.name),
        "col_axis": column_axis(stage.name), "values": rounded(sampled),
        "note": _sampling_note(mats.shape[1], row_step, mats.shape[2], col_step),
    }


def _column_limit(name: str, n_heads: int, n_rows: int) -> int:
    """Per-head feature stages share a budget; attention weights keep every key (up to MAX_COLS)."""
    if n_heads == 1 or name.endswith(("weights", "score_bias")):
        return MAX_COLS
    return min(MAX_COLS, max(16, MAX_HEAD_VALUES // (n_heads * n_rows)))


def _row_axis(name: str) -> str:
    return "query position" if name.endswith(("weights", "score_bias")) else "position"


def _sampling_note(n_rows: int, row_step: int, n_cols: int, col_step: int) -> str:
    parts = [f"every {step}th of {size} {what} shown" for size, step, what in
             ((n_rows, row_step, "rows"), (n_cols, col_step, "columns")) if step > 1]
    return ("down-sampled: " + "; ".join(parts)) if parts else ""


def next_tokens(result: Trace, label_of: Callable[[int], str]) -> list[dict[str, Any]]:
    """The TOP_K most likely next tokens after the last position."""
    if "logits" not in result.names():
        return []
    probs = result["probs"].tensor[0, -1].float()  # (|V|,)
    values, indices = probs.topk(min(TOP_K, probs.shape[-1]))
    return [{"id": i, "token": label_of(i), "p": float(f"{v:.{DIGITS}g}")}
            for v, i in zip(values.tolist(), indices.tolist())]


# -- positions ------------------------------------------------------------------------------------------


def positional_view(model: Transformer) -> dict[str, Any]:
    positional = model.positional
    component = model.provenance.get("positional")
    name = f"{component.kind}:{component.name} ({component.distribution})" if component else type(positional).__name__
    relative = component is not None and "relative" in component.promises
    context = model.spec.model.context_length if model.spec is not None else MAX_POSITIONS
    n_positions = min(positional.max_positions or context, MAX_POSITIONS)
    if positional.adds:
        table = additive_signal(model, n_positions)  # (P, d)
        heat, kind, axis = table, "additive", "feature (d_model)"
        hands = _additive_hands(table) if relative else []
    elif positional.rotates:
        heat, kind, axis = rotation_angles(model, n_positions), "rotary", "head feature (|rotation angle|, rad)"
        hands = _rotary_hands(model, n_positions) if relative else []
    else:
        return {"kind": "none", "component": name, "hands": []}
    cols, col_step = stride_index(heat.shape[1], MAX_COLS)
    return {"kind": kind, "component": name, "positions": n_positions, "col_axis": axis, "cols": cols,
            "values": rounded(heat[:, cols]), "note": _sampling_note(n_positions, 1, heat.shape[1], col_step),
            "hands": hands}


def _pick(n_pairs: int) -> list[int]:
    if n_pairs <= MAX_HANDS:
        return list(range(n_pairs))
    return sorted({round(i * (n_pairs - 1) / (MAX_HANDS - 1)) for i in range(MAX_HANDS)})


def _additive_hands(table: torch.Tensor) -> list[dict[str, Any]]:
    """Sinusoid pairs: features (2i, 2i+1) hold (sin, cos) of pos·ω_i, a hand at angle pos·ω_i."""
    hands = []
    for pair in _pick(table.shape[1] // 2):
        sin, cos = table[:, 2 * pair], table[:, 2 * pair + 1]
        hands.append({"label": f"pair {pair} (features {2 * pair}, {2 * pair + 1})",
                      "angles": rounded(torch.atan2(sin, cos))})
    return hands


def _rotary_hands(model: Transformer, n_positions: int) -> list[dict[str, Any]]:
    """Each rotated feature pair's angle by position, read off ``rotate`` (works for any pair layout)."""
    rotations = _rotations(model, n_positions)  # (P, hs, hs): column j is R_p e_j
    pairs = _rotation_pairs(rotations[1] if n_positions > 1 else rotations[0])
    hands = []
    for index in _pick(len(pairs)):
        j, partner = pairs[index]
        angles = torch.atan2(rotations[:, partner, j], rotations[:, j, j])  # (P,)
        hands.append({"label": f"pair {index} (features {j}, {partner})", "angles": rounded(angles)})
    return hands


def _rotations(model: Transformer, n_positions: int) -> torch.Tensor:
    head_dim = rotated_width(model)
    device = model.embedding.weight.device
    basis = torch.eye(head_dim, device=device)[:, None, None, :].expand(head_dim, 1, n_positions, head_dim)
    with torch.no_grad():
        rotated, _ = model.positional.rotate(basis, basis)  # (hs, 1, P, hs): [j, 0, p] = R_p e_j
    return rotated[:, 0].permute(1, 2, 0).float().cpu()  # (P, hs, hs): [p, :, j] = R_p e_j


def _rotation_pairs(rotation: torch.Tensor) -> list[tuple[int, int]]:
    """(j, partner) for each plane R turns: partner = the other non-zero of column j."""
    off = rotation.abs() * (1 - torch.eye(rotation.shape[0]))
    pairs, seen = [], set()
    for j in range(rotation.shape[0]):
        partner = int(off[:, j].argmax())
        if j not in seen and off[partner, j] > 0:
            pairs.append((j, partner))
            seen |= {j, partner}
    return pairs


# -- normalisation --------------------------------------------------------------------------------------


def norm_view(model: Transformer, result: Trace, labels: Sequence[str]) -> dict[str, Any] | None:
    """blocks.0.norm1 on one token's input vector at several scales, step by step."""
    names = result.names()
    if "blocks.0.norm1" not in names or not len(model.blocks):
        return None
    norm = model.blocks[0].norm1
    source = result.stages[names.index("blocks.0.norm1") - 1]  # the norm's input, as the block passed it
    vectors = source.tensor[0].detach().float()  # (N, d)
    cols, col_step = stride_index(vectors.shape[-1], MAX_NORM_BARS)
    tokens = [_norm_token(norm, vectors[t], cols) for t in range(min(len(vectors), MAX_NORM_TOKENS))]
    component = model.provenance.get("blocks.0.norm1")
    return {
        "module": type(norm).__name__, "input_stage": source.name,
        "component": f"{component.kind}:{component.name}" if component else None,
        "scale_invariant": bool(component and "scale_invariant" in component.promises),
        "scales": list(NORM_SCALES), "cols": cols, "tokens": tokens,
        "labels": [f"{i} '{labels[i]}'" if i < len(labels) else str(i) for i in range(len(tokens))],
        "note": _sampling_note(1, 1, vectors.shape[-1], col_step),
    }


def _norm_token(norm, vector: torch.Tensor, cols: list[int]) -> list[dict[str, list]]:
    """For each scale: the named steps of norm(scale · vector)."""
    with torch.no_grad():
        return [{name: rounded(values[cols]) for name, values in norm_steps(norm, scale * vector)}
                for scale in NORM_SCALES]


def norm_steps(norm, x: torch.Tensor) -> list[tuple[str, torch.Tensor]]:
    """input, centred, normalised (what the norm's own formula gives), then the module's output."""
    output = norm(x.to(_param_dtype(norm))).float()
    if isinstance(norm, torch.nn.LayerNorm):
        centred = x - x.mean()
        return [("input", x), ("centred", centred),
                ("normalised", centred / (centred.pow(2).mean() + norm.eps).sqrt()), ("output", output)]
    if isinstance(norm, torch.nn.RMSNorm):
        eps = norm.eps if norm.eps is not None else torch.finfo(x.dtype).eps
        return [("input", x), ("normalised", x / (x.pow(2).mean() + eps).sqrt()), ("output", output)]
    return [("input", x), ("output", output)]


def _param_dtype(module) -> torch.dtype:
    return next((p.dtype for p in module.parameters()), torch.float32)
