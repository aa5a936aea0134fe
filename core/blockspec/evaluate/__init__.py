"""Scoring what a spec composes: held-out text in units no tokenizer decides (``evaluate_text``), and
standard benchmarks through lm-evaluation-harness (``blockspec.evaluate.harness``, the ``eval`` extra).

Above training (it reuses its eval mode and finiteness checks), below the inspection tools and the command
line. Importing it never imports the harness.
"""

from __future__ import annotations

from blockspec.evaluate.perplexity import Perplexity
from blockspec.evaluate.text import evaluate_text

__all__ = ["Perplexity", "evaluate_text"]
