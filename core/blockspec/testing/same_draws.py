"""One verdict however a plugin is installed: the kit's draws never read the plugin's own source constants.

Hypothesis (6.170: ``hypothesis.internal.conjecture.providers._get_local_constants``) mixes the literal
constants of every imported module outside site-packages into its draws. A plugin installed editable or on
PYTHONPATH is such a module, the same plugin from a wheel is not: the kit would draw other cases, and a
mutant could be caught from one install and missed from the other. No public setting turns this off, so
while the kit runs the private hook returns no constants. tests/verify/test_same_draws.py fails if the hook
disappears.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from hypothesis.internal.conjecture import providers

HOOK = "_get_local_constants"  # the private name patched; providers.CONSTANTS_CACHE memoises what it returned


@contextmanager
def without_local_constants() -> Iterator[None]:
    """Inside: hypothesis draws from its global constants only; its cache is emptied on entry and exit, so
    neither pool leaks into the other side."""
    original = getattr(providers, HOOK, None)
    if original is None:  # a hypothesis without the hook mixes in no local constants
        yield
        return
    nothing = providers.Constants()
    setattr(providers, HOOK, lambda: nothing)
    providers.CONSTANTS_CACHE.cache.clear()
    try:
        yield
    finally:
        setattr(providers, HOOK, original)
        providers.CONSTANTS_CACHE.cache.clear()
