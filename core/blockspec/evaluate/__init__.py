"""Scoring a model on held-out text: strided windows, loss, perplexity, bits per byte (``evaluate_text``).

Above training (it reuses its eval mode and finiteness checks), below the inspection tools and the command line.
"""

from __future__ import annotations

from blockspec.evaluate.perplexity import Perplexity
from blockspec.evaluate.text import evaluate_text

__all__ = ["Perplexity", "evaluate_text"]
