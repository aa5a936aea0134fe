"""A progress bar on stderr with loss and tokens/s; silent when stderr is not a terminal."""

from __future__ import annotations

import sys
from typing import TextIO

from tqdm import tqdm


class Progress:
    """Wraps tqdm; ``enabled`` False (not a TTY, --json, --quiet, rank > 0) makes every call a no-op."""

    def __init__(self, *, total: int, initial: int = 0, enabled: bool = True, stream: TextIO | None = None,
                 min_interval: float = 0.1) -> None:
        stream = stream or sys.stderr
        self.enabled = enabled and stream.isatty()
        self.bar = tqdm(total=total, initial=initial, file=stream, unit="step", dynamic_ncols=True,
                        disable=not self.enabled, leave=False, mininterval=min_interval)

    def update(self, *, loss: float, tokens_per_s: float, mfu: float | None = None) -> None:
        if self.enabled:
            share = "" if mfu is None else f"  MFU {100 * mfu:.1f}%"
            self.bar.set_postfix_str(f"loss {loss:.4f}  {tokens_per_s:,.0f} tok/s{share}", refresh=False)
            self.bar.update(1)

    def write(self, line: str, stream: TextIO | None = None) -> None:
        """Print a line above the bar (or plainly when there is none)."""
        if self.enabled:
            self.bar.write(line, file=stream or sys.stdout)
        else:
            print(line, file=stream or sys.stdout, flush=True)

    def close(self) -> None:
        self.bar.close()
