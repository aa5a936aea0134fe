"""Small specs for tests, as TOML text: each test states the sizes and components it runs."""

from __future__ import annotations

from typing import Any

from tomli_w import dumps


def spec_text(*, positional: str = "learned", norm: str = "layernorm", activation: str = "gelu", head: str = "lm",
              tied: bool | None = None, **model: Any) -> str:
    """``[model]`` with the given fields, then one table per component kind, each chosen by ``use``."""
    head_table: dict[str, Any] = {"use": head} if tied is None else {"use": head, "tied": tied}
    return dumps({"model": model, "positional": {"use": positional}, "norm": {"use": norm},
                  "activation": {"use": activation}, "head": head_table})
