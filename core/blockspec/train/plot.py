"""Loss curves as a PNG, with matplotlib (the optional ``plot`` extra) on a headless backend.

Torch-free at import (``History`` is an annotation only), so the command line can check a
``--plot`` file against ``PLOT_IMAGE`` before any work.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from blockspec.errors import BlockspecError
from blockspec.outputs.atomic_file import atomic_file
from blockspec.outputs.kinds import file_kind

if TYPE_CHECKING:
    from blockspec.train.loop import History

# what ``--plot`` may replace: a picture as matplotlib writes one (PNG, PDF or SVG), never another file
PLOT_IMAGE = file_kind("a plot image (PNG, PDF or SVG)", signatures=(b"\x89PNG\r\n\x1a\n", b"%PDF-", b"<?xml"))


class PlotError(BlockspecError, RuntimeError):
    """matplotlib is missing (a figure that cannot be written is an ``OutputError``)."""


class MissingDependencyError(PlotError, ImportError):
    """matplotlib (the optional ``plot`` extra) is not installed; an ImportError too, for callers that skip plots."""


def pyplot():
    """matplotlib's pyplot on the headless Agg backend (files only, no display): the one way blockspec loads it."""
    try:
        import matplotlib
    except ImportError:
        raise MissingDependencyError("plots need matplotlib, which is not installed; install it with: "
                                     "pip install 'blockspec[plot]'") from None
    matplotlib.use("Agg")
    from matplotlib import pyplot as loaded

    return loaded


def plot_losses(histories: Mapping[str, History], path: str | Path, *, title: str = "") -> Path:
    """Per-step training loss (thin) and evaluated validation loss (markers) of each named run."""
    plt = pyplot()
    figure, axes = plt.subplots(figsize=(8, 5))
    for index, (name, history) in enumerate(histories.items()):
        color = f"C{index}"
        axes.plot(range(1, len(history.train) + 1), history.train, color=color, alpha=0.35, lw=0.8,
                  label=f"{name} train")
        steps = [e.step for e in history.evals]
        axes.plot(steps, [e.val_loss for e in history.evals], "o-", color=color, label=f"{name} validation")
    axes.set(xlabel="step", ylabel="cross-entropy (nats / token)", title=title)
    axes.set_ylim(*_limits(histories))
    scale = _bits_per_nat(histories)
    if scale is not None:  # bits per byte is the loss times the validation text's tokens per byte / ln 2
        axes.secondary_yaxis("right", functions=(lambda nats: nats * scale, lambda bits: bits / scale)).set_ylabel(
            "validation bits per byte")
    axes.grid(alpha=0.3)
    axes.legend()
    try:
        save_figure(figure, path)
    finally:
        plt.close(figure)
    return Path(path)


def save_figure(figure, path: str | Path) -> Path:
    """Write ``figure`` to ``path`` atomically (the suffix picks the format); an OSError is an OutputError."""
    with atomic_file(path) as staging:
        figure.savefig(staging, dpi=110, bbox_inches="tight")
    return Path(path)


def _bits_per_nat(histories: Mapping[str, History]) -> float | None:
    """The one factor from a loss to bits per byte that every run's evaluations share, or None."""
    scales = {round(e.val_bpb / e.val_loss, 9) for h in histories.values() for e in h.evals
              if e.val_bpb is not None and e.val_loss > 0}
    complete = all(e.val_bpb is not None for h in histories.values() for e in h.evals)
    return scales.pop() if complete and len(scales) == 1 else None


def _limits(histories: Mapping[str, History]) -> tuple[float, float]:
    """The y range; the top leaves out the highest tenth of the step losses, or the first steps flatten the rest."""
    losses = sorted(loss for h in histories.values() for loss in h.train)
    values = [e.val_loss for h in histories.values() for e in h.evals]
    if losses:
        values += [losses[0], losses[int(0.9 * (len(losses) - 1))]]
    return (0.95 * min(values), 1.1 * max(values)) if values else (0.0, 1.0)

