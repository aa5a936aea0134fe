"""Text for training tests: Tiny Shakespeare when it lies beside the repository, else a made-up play."""

from __future__ import annotations

import os
import random
from pathlib import Path

SHAKESPEARE = Path(__file__).resolve().parents[1].parent / "shared/data/tinyshakespeare.txt"
SHAKESPEARE_LENGTH = 1_115_394

SPEAKERS = ("ROMEO", "JULIET", "FIRST CITIZEN", "KING HENRY", "LADY ANNE")
WORDS = ("the", "and", "my", "lord", "thou", "art", "good", "night", "sweet", "love", "what", "say", "you",
         "to", "me", "shall", "not", "be", "so", "with", "heart", "of", "this", "day", "come", "hence")


def shakespeare_path() -> Path | None:
    """$BLOCKSPEC_DATA, or shared/data/tinyshakespeare.txt beside the clone; None when neither exists."""
    candidate = Path(os.environ.get("BLOCKSPEC_DATA", SHAKESPEARE))
    return candidate if candidate.is_file() else None


def small_play(n_lines: int = 600, seed: int = 0) -> str:
    """A deterministic play-shaped text: speakers, short lines of common words, blank lines."""
    rng = random.Random(seed)
    lines = []
    for _ in range(n_lines // 4):
        lines.append(f"{rng.choice(SPEAKERS)}:")
        for _ in range(rng.randint(1, 3)):
            words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 8)))
            lines.append(words.capitalize() + rng.choice((".", ",", "!", "?", ";")))
        lines.append("")
    return "\n".join(lines)
