"""The one progress bar of the commands (training steps, sweep runs, bytes tokenised) on stderr, and the lines
printed above it; the bar is silent when stderr is not a terminal, the lines never are."""

from __future__ import annotations

import sys
from typing import TextIO

from tqdm import tqdm


class Progress:
    """Wraps tqdm; ``enabled`` False (not a TTY, --json, --quiet, rank > 0) makes the bar a no-op."""

    def __init__(self, *, total: int, initial: int = 0, unit: str = "step", scale: bool = False,
                 description: str | None = None, enabled: bool = True, stream: TextIO | None = None,
                 min_interval: float = 0.1) -> None:
        stream = stream or sys.stderr
        self.enabled = enabled and stream.isatty()
        self.bar = tqdm(total=total, initial=initial, file=stream, unit=unit, unit_scale=scale, desc=description,
                        dynamic_ncols=True, disable=not self.enabled, leave=False, mininterval=min_interval)

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def advance(self, amount: int = 1, *, status: str | None = None) -> None:
        """``amount`` more units done; ``status`` replaces the text after the bar."""
        if self.enabled:
            if status is not None:
                self.bar.set_postfix_str(status, refresh=False)
            self.bar.update(amount)

    def update(self, *, loss: float, tokens_per_s: float, mfu: float | None = None) -> None:
        """One training step done, at this loss and rate."""
        share = "" if mfu is None else f"  MFU {100 * mfu:.1f}%"
        self.advance(status=f"loss {loss:.4f}  {tokens_per_s:,.0f} tok/s{share}")

    def write(self, line: str, stream: TextIO | None = None) -> None:
        """Print a line above the bar (or plainly when there is none)."""
        if self.enabled:
            self.bar.write(line, file=stream or sys.stdout)
        else:
            print(line, file=stream or sys.stdout, flush=True)

    def close(self) -> None:
        self.bar.close()
