"""No positional encoding (NoPE): the layers of SmolLM3, Llama 4 and Cohere 2 that skip RoPE."""

from __future__ import annotations

from blockspec.plugin import PositionalEncoding


class NoPositions(PositionalEncoding):
    """Every hook is the identity and no flag is raised, so the model calls none of them: a layer built with
    it knows a token's place only through the causal mask, which is what NoPE layers rely on."""

    tensor_positions = True  # the hooks ignore start, so tensor starts cost nothing

    def __init__(self) -> None:
        super().__init__(max_positions=None)
