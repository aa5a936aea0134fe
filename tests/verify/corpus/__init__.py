"""The mutation corpus: realistic broken copies of correct components, and correct but unusual ones.

One module per kind. Each mutant is a copy of a correct component (first-party, ``blockspec-extras``,
or one of the corpus's own correct ones) with one realistic bug, registered with the promises the
correct component declares, under the distribution ``mutants``; it names the property that must
catch it, the property of the promise the bug breaks. The correct but unusual components
(distribution ``unusual``) must pass every property. ``python -m tests.verify.corpus`` prints the
mutation score.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module
from types import ModuleType, SimpleNamespace
from typing import Any

from attrs import frozen

from blockspec.plugin import hookimpl

MUTANTS = "mutants"
UNUSUAL = "unusual"
VERSION = "0.0"
KIND_MODULES = ("positional", "norm", "activation", "head", "attention", "block", "ffn", "adapter")

# The cache path (item 1): per component, cached and uncached computation agree, start is honoured and
# score_bias takes n_q != n_k; for a whole model, KV-cached decoding gives the uncached logits.
CACHE_POSITIONS = "cache_positions"
CACHE_ATTENTION = "cache_attention"
CACHE_PADDING = "cache_padding"  # a ragged (left-padded) batch through the cache: each row as alone
MODEL_CACHE = "model_cache"
# Properties that issue 15 adds to the kit, under the names the mutants expect: renamed here in one
# place if they land under others. DTYPES: half-precision inputs keep their dtype (item 3).
DTYPES = "dtypes"
# With a relative encoder (RoPE) an attention's outputs do not depend on where the positions start: the only
# property that sees rotary applied to v.
RELATIVE_ATTENTION = "relative_attention"


@frozen(kw_only=True)
class Entry:
    """One corpus component. ``catches``: the property that must fail (None: a correct component)."""

    kind: str
    name: str
    config_cls: type
    build: Callable[..., Any]
    promises: tuple[str, ...]
    bug: str
    catches: str | None = None
    serves: Callable[[Any], bool] | None = None  # the size constraint it registers with (None: every size)

    @property
    def qualified(self) -> str:
        return f"{self.kind}:{self.name}"


def declared(plugin: ModuleType, kind: str, name: str) -> tuple[str, ...]:
    """The promises ``plugin`` registers ``kind:name`` with: a mutant keeps them as the original changes."""
    found: dict[tuple[str, str], tuple[str, ...]] = {}

    def register(k: str, n: str, config_cls: type, build: Callable, *, summary=None, promises=(), serves=None) -> None:
        found[(k, n)] = tuple(promises)

    plugin.blockspec_register(register=register)
    return found[(kind, name)]


class Corpus:
    """One kind module's entries, broken and correct."""

    def __init__(self) -> None:
        self.entries: list[Entry] = []

    def mutant(self, kind: str, name: str, config_cls: type, build: Callable, *, like: tuple[str, ...],
               catches: str, bug: str, serves: Callable[[Any], bool] | None = None) -> None:
        """A broken copy: ``like`` are the correct component's promises (``serves`` its sizes, if it says),
        ``catches`` the property of the broken one."""
        self.entries.append(Entry(kind=kind, name=name, config_cls=config_cls, build=build, promises=like,
                                  catches=catches, bug=bug, serves=serves))

    def correct(self, kind: str, name: str, config_cls: type, build: Callable, *, promises: tuple[str, ...],
                why: str, serves: Callable[[Any], bool] | None = None) -> None:
        """A correct component whose every property must pass; ``why`` says what makes it unusual."""
        self.entries.append(Entry(kind=kind, name=name, config_cls=config_cls, build=build, promises=promises,
                                  bug=why, serves=serves))


def entries() -> list[Entry]:
    """Every corpus entry, kind by kind."""
    return [e for kind in KIND_MODULES for e in import_module(f"{__name__}.{kind}").CORPUS.entries]


def mutants() -> list[Entry]:
    return [e for e in entries() if e.catches is not None]


def unusual() -> list[Entry]:
    return [e for e in entries() if e.catches is None]


def plugin(chosen: list[Entry]) -> object:
    """A plugin object whose ``blockspec_register`` registers ``chosen``, for ``load_registry(plugins=...)``."""

    @hookimpl
    def blockspec_register(register) -> None:
        for e in chosen:
            register(e.kind, e.name, e.config_cls, e.build, promises=e.promises, serves=e.serves)

    return SimpleNamespace(blockspec_register=blockspec_register)


def plugins() -> list[tuple[object, str, str]]:
    """The two distributions, ready for ``blockspec.load_registry(plugins=...)``."""
    return [(plugin(mutants()), MUTANTS, VERSION), (plugin(unusual()), UNUSUAL, VERSION)]
