"""Typed reading of a Hugging Face config.json, and key readers several families share.

A family's ``spec_dict`` reads every key through a ``ConfigReader`` and records, with
``problem``, each key it cannot honour; all problems are raised together, each at its key.
"""

from __future__ import annotations

from typing import Any

from blockspec.errors import CheckpointError, Problem

_MISSING = object()


class ConfigReader:
    """Typed access to config keys; each problem is kept, all are raised together."""

    def __init__(self, config: dict[str, Any], file: str) -> None:
        self.config, self.file = config, file
        self.problems: list[Problem] = []

    def get(self, key: str, kind: type, default: Any = _MISSING, *, aliases: tuple[str, ...] = ()) -> Any:
        for name in (key, *aliases):
            value = self.config.get(name)
            if value is not None:
                return self._typed(name, value, kind)
        if default is _MISSING:
            self.problem(key, "missing required key")
        return None if default is _MISSING else default

    def _typed(self, key: str, value: Any, kind: type) -> Any:
        ok = isinstance(value, (int, float)) and type(value) is not bool if kind is float else type(value) is kind
        if not ok:
            self.problem(key, f"expected {kind.__name__}, found {type(value).__name__} {value!r:.40}")
            return None
        return float(value) if kind is float else value

    def problem(self, key: str, message: str, hint: str | None = None) -> None:
        self.problems.append(Problem(file=self.file, path=f"$.{key}", message=message, hint=hint))

    def raise_problems(self) -> None:
        if self.problems:
            raise CheckpointError("\n".join(str(p) for p in self.problems))


def rope_theta(r: ConfigReader) -> float:
    """rope_theta from new-style rope_parameters or old-style top-level keys; scaling refused."""
    parameters = r.config.get("rope_parameters")
    scaling = r.config.get("rope_scaling")
    for key, table in (("rope_parameters", parameters), ("rope_scaling", scaling)):
        if table is None:
            continue
        if not isinstance(table, dict):
            r.problem(key, f"expected a table, found {type(table).__name__}")
            continue
        kind = table.get("rope_type", table.get("type", "default"))
        if kind != "default":
            r.problem(f"{key}.rope_type", f"RoPE scaling {kind!r} is not supported",
                      "blockspec's rope has no scaling; only rope_type 'default' imports")
        if table.get("partial_rotary_factor", 1.0) != 1.0:
            r.problem(f"{key}.partial_rotary_factor", "partial RoPE is not supported", "expected 1.0")
    if isinstance(parameters, dict) and parameters.get("rope_theta") is not None:
        theta = ConfigReader(parameters, r.file)
        value = theta.get("rope_theta", float)
        r.problems += [Problem(file=p.file, path="$.rope_parameters" + p.path[1:], message=p.message)
                       for p in theta.problems]
        return value if value is not None else 10000.0
    return r.get("rope_theta", float, 10000.0)
