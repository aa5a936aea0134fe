"""PNG pictures of a trace: attention heads, the positional encoding, a stage overview.

matplotlib is optional (``pip install 'blockspec[plot]'``) and loaded on use by ``train.plot.pyplot``.
Pictures show the first sequence of the batch.
"""

from __future__ import annotations

import glob
import math
import re
from collections.abc import Sequence
from pathlib import Path

import torch

from blockspec.modules.transformer import Transformer
from blockspec.inspect.trace import SECTIONS, Trace
from blockspec.outputs.targets import check_writable_target
from blockspec.train.plot import PLOT_IMAGE, MissingDependencyError, pyplot, save_figure  # noqa: F401 (old path)

MAX_POSITIONS_SHOWN = 256
ANNOTATE_UP_TO = 8  # write the value in each attention cell when N is at most this
# by section number: a section's label names the model's component ("7.3 norm (rmsnorm)"), its colour does not change
SECTION_COLOURS = dict(zip((s.split(" ", 1)[0] for s in SECTIONS),
                           ("tab:purple", "tab:green", "tab:orange", "tab:red", "tab:brown", "tab:blue")))


def write_plots(trace: Trace, model: Transformer, out_dir: str | Path, labels: Sequence[str]) -> list[Path]:
    """Write every picture for ``trace`` into ``out_dir``; ``labels`` name the N input tokens."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    plt = pyplot()
    written = [plot_attention(plt, name, w[0], labels, out) for name, w in trace.select("*.attn.weights").items()]
    if model.positional.adds or model.positional.rotates:
        written.append(plot_positional(plt, model, out))
    written.append(plot_overview(plt, trace, out))
    return written


class _SiblingFiles:
    """Stands in for the plots' output folder: ``out / "stages.png"`` is the file itself, and any other
    picture ``out / "NAME.png"`` is its sibling STEM-NAME.SUFFIX, so the file's suffix picks every format."""

    def __init__(self, target: Path) -> None:
        self.target = target

    def __truediv__(self, name: str) -> Path:
        picture = name.removesuffix(".png")
        if picture == "stages":
            return self.target
        return self.target.with_name(f"{self.target.stem}-{picture}{self.target.suffix}")


def sibling_pictures(file: str | Path) -> list[Path]:
    """The pictures an earlier ``write_plots_beside(..., file)`` left beside ``file`` (STEM-NAME.SUFFIX), which
    the next one may replace: a command asks about them before any work, when it cannot yet know the layers."""
    target = Path(file)
    names = re.compile(re.escape(target.stem) + r"-(?:.+\.attention|positional)" + re.escape(target.suffix))
    return sorted(p for p in target.parent.glob(f"{glob.escape(target.stem)}-*") if names.fullmatch(p.name))


def _check_pictures(trace: Trace, model: Transformer, out: _SiblingFiles, *, overwrite: bool) -> None:
    """Every picture about to be written replaces, with ``overwrite``, at most an older picture, never another file."""
    names = ["stages.png", *map(_attention_file, trace.select("*.attn.weights"))]
    names += ["positional.png"] if model.positional.adds or model.positional.rotates else []
    for name in names:
        check_writable_target(out / name, kind=PLOT_IMAGE, overwrite=overwrite)


def _attention_file(stage: str) -> str:
    return f"{stage.replace('.attn.weights', '')}.attention.png"


def write_plots_beside(trace: Trace, model: Transformer, file: str | Path, labels: Sequence[str], *,
                       overwrite: bool = False) -> list[Path]:
    """The stage overview in ``file``, then one sibling per attention layer and the positional encoding;
    an existing picture among them is replaced only with ``overwrite`` (checked before the first is drawn)."""
    out, plt = _SiblingFiles(Path(file)), pyplot()
    _check_pictures(trace, model, out, overwrite=overwrite)
    written = [plot_overview(plt, trace, out)]
    written += [plot_attention(plt, name, w[0], labels, out) for name, w in trace.select("*.attn.weights").items()]
    if model.positional.adds or model.positional.rotates:
        written.append(plot_positional(plt, model, out))
    return written


def plot_attention(plt, name: str, weights: torch.Tensor, labels: Sequence[str], out: Path) -> Path:
    """One heatmap per head of weights (h, N, N): rows are queries, columns the keys they attend to."""
    n_heads, n_tokens = weights.shape[0], weights.shape[-1]
    cols = min(n_heads, 4)
    rows = math.ceil(n_heads / cols)
    size = max(3.2, 0.3 * n_tokens)
    fig, axes = plt.subplots(rows, cols, figsize=(size * cols + 1.5, size * rows + 1.0), squeeze=False,
                             layout="constrained")
    for head, ax in enumerate(axes.flat):
        if head >= n_heads:
            ax.axis("off")
            continue
        image = ax.imshow(weights[head].float().cpu().numpy(), vmin=0.0, vmax=1.0, cmap="viridis")
        _token_axes(ax, labels, n_tokens, first_column=head % cols == 0, last_row=head >= n_heads - cols)
        ax.set_title(f"head {head}", fontsize=9)
        if n_tokens <= ANNOTATE_UP_TO:
            _annotate(ax, weights[head])
    fig.colorbar(image, ax=axes.ravel().tolist(), shrink=0.8, label="attention weight")
    fig.suptitle(f"{name}  [h={n_heads}, N={n_tokens}, N={n_tokens}]")
    return _save(plt, fig, out / _attention_file(name))


def _token_axes(ax, labels: Sequence[str], n_tokens: int, *, first_column: bool, last_row: bool) -> None:
    ticks = list(range(n_tokens)) if n_tokens <= 32 else list(range(0, n_tokens, max(1, n_tokens // 16)))
    names = [f"{i} '{labels[i]}'" if i < len(labels) else str(i) for i in ticks]
    ax.set_xticks(ticks, names, rotation=90, fontsize=7)
    ax.set_yticks(ticks, names if first_column else [], fontsize=7)
    if last_row:
        ax.set_xlabel("key position (attended to)", fontsize=8)
    if first_column:
        ax.set_ylabel("query position", fontsize=8)


def _annotate(ax, weights: torch.Tensor) -> None:
    for (i, j), value in _cells(weights):
        ax.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=6,
                color="black" if value > 0.6 else "white")


def _cells(matrix: torch.Tensor):
    values = matrix.float().cpu().tolist()
    return (((i, j), v) for i, row in enumerate(values) for j, v in enumerate(row))


def plot_positional(plt, model: Transformer, out: Path) -> Path:
    """Additive encoders: p[pos] over positions x features. Rotary: each feature's rotation angle."""
    positional = model.positional
    context = model.spec.model.context_length if model.spec is not None else MAX_POSITIONS_SHOWN
    n_positions = min(positional.max_positions or context, MAX_POSITIONS_SHOWN)
    fig, ax = plt.subplots(figsize=(9, 6))
    if positional.adds:
        values, what = additive_signal(model, n_positions), "value added to the embedding"
        ax.set_xlabel("feature (d_model)")
        title = f"{type(positional).__name__}: p[pos], positions x features"
    else:
        values, what = rotation_angles(model, n_positions), "rotation angle |θ| (radians)"
        ax.set_xlabel("feature of a head (each rotated pair appears twice)")
        title = f"{type(positional).__name__}: rotation angle of each q/k feature by position"
    image = ax.imshow(values.numpy(), aspect="auto", cmap="RdBu_r" if positional.adds else "viridis",
                      interpolation="nearest")
    ax.set_ylabel("position")
    ax.set_title(title)
    fig.colorbar(image, ax=ax, label=what)
    return _save(plt, fig, out / "positional.png")


def additive_signal(model: Transformer, n_positions: int) -> torch.Tensor:
    """(P, d): what the encoder's embed adds to a zero input at positions 0..P-1."""
    positional = model.positional
    device = model.embedding.weight.device
    zeros = torch.zeros(1, n_positions, model.embedding.embedding_dim, device=device)
    with torch.no_grad():
        return positional.embed(zeros).squeeze(0).float().cpu()  # (P, d)


def rotated_width(model: Transformer) -> int:
    """The width the encoder's rotate() takes: [model] head_dim (a latent attention's heads are wider, and only
    this part of them turns), else the first attention's head_dim."""
    if model.spec is not None:
        return model.spec.model.head_dim
    return model.blocks[0].attn.head_dim if len(model.blocks) else model.embedding.embedding_dim


def rotation_angles(model: Transformer, n_positions: int) -> torch.Tensor:
    """(P, hs): arccos of the diagonal of each position's rotation, from ``rotate`` alone (any layout)."""
    head_dim = rotated_width(model)
    device = model.embedding.weight.device
    basis = torch.eye(head_dim, device=device)[:, None, None, :].expand(head_dim, 1, n_positions, head_dim)
    with torch.no_grad():
        rotated, _ = model.positional.rotate(basis, basis)  # (hs, 1, P, hs): R_p e_j
    diagonal = rotated[:, 0].diagonal(dim1=0, dim2=2).float().cpu()  # (P, hs): (R_p e_j)_j = cos θ
    return diagonal.clamp(-1.0, 1.0).arccos()


def plot_overview(plt, trace: Trace, out: Path) -> Path:
    """The RMS of every stage per token, in stage order: the residual stream's size at a glance.

    The probabilities are left out: a distribution over |V|, they would only squash the scale.
    """
    stages = [s for s in trace.stages if s.tensor.dim() >= 3 and s.tensor.is_floating_point() and s.name != "probs"]
    rms = torch.stack([_rms_per_token(s.tensor[0]) for s in stages])  # (S, N)
    fig, ax = plt.subplots(figsize=(max(10.0, 0.16 * len(stages) + 3), 6.5))
    for token in range(rms.shape[1]):
        ax.plot(range(len(stages)), rms[:, token].numpy(), marker=".", linewidth=1, label=f"token {token}")
    ax.set_yscale("log")
    ax.set_xticks(range(len(stages)), [f"{s.name} {list(s.shape)}" for s in stages], rotation=90, fontsize=6)
    for tick, stage in zip(ax.get_xticklabels(), stages):
        tick.set_color(SECTION_COLOURS.get(stage.chapter, "black"))
    ax.set_xlabel("stage (colour: chapter section)")
    ax.set_ylabel("RMS of the stage's values (log scale)")
    ax.set_title(f"Stage overview: {len(stages)} stages, one line per token")
    _section_legend(ax, [s.section for s in stages], rms.shape[1])
    return _save(plt, fig, out / "stages.png")


def _rms_per_token(tensor: torch.Tensor) -> torch.Tensor:
    """(N, F) or (h, N, F) -> (N,)."""
    values = tensor.float().cpu()
    values = values if values.dim() == 2 else values.transpose(0, 1).flatten(1)  # (N, h*F)
    return values.pow(2).mean(dim=-1).sqrt().clamp_min(1e-12)


def _section_legend(ax, sections: list[str], n_tokens: int) -> None:
    from matplotlib.patches import Patch

    handles, labels = ax.get_legend_handles_labels()
    order = list(SECTION_COLOURS)
    shown = sorted(set(sections), key=lambda s: (order.index(_number(s)) if _number(s) in order else len(order), s))
    handles += [Patch(color=SECTION_COLOURS.get(_number(s), "black")) for s in shown]
    labels += shown
    ax.legend(handles, labels, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))


def _number(section: str) -> str:
    return section.split(" ", 1)[0]


def _save(plt, fig, path: Path) -> Path:
    try:
        return save_figure(fig, path)
    finally:
        plt.close(fig)
