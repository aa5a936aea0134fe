"""Public hypothesis strategies for the cache path: ``cache_cases(component)`` (see ``cache_cases.CacheCase``).

The prefix ends just inside the context length (so the chunks after it cross it), anywhere up to
4·context + 8, or far past it: where the tables components keep (a cos/sin cache of context_length
rows, a learned table, a relative-bias table) run out, and where a cached prefix meets positions
computed past them.
"""

from __future__ import annotations

import attrs
from hypothesis import strategies as st

from blockspec.registry.components import Component
from blockspec.testing.cache_cases import ENCODERS, CacheCase
from blockspec.testing.strategies import configs, model_configs

FAR = 1100  # how far a prefix may reach, for checks of one component's hooks (cheap at any length)
NEAR = 300  # the same for checks that attend over every position (O(T²) each)
CACHE_DTYPES = ("float32", "float64")  # cached and uncached agree to rounding; half precision is another check's


@st.composite
def cache_cases(draw, component: Component, *, far: int = FAR) -> CacheCase:
    """A model of 1 or 2 layers; a prefix of context-3..context, 0..4·context+8 or 0..``far`` positions; then
    1..6 chunks of 1..4 tokens; the reference encoder an attention component is decoded with."""
    model = draw(model_configs())
    model = attrs.evolve(model, n_layers=draw(st.integers(1, 2)))  # a model without layers has no cache
    ctx = model.context_length
    prefix = draw(st.integers(max(0, ctx - 3), ctx) | st.integers(0, 4 * ctx + 8) | st.integers(0, far))
    chunks = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=6)))
    return CacheCase(
        model=model,
        config=draw(configs(component.config_cls, model=model)),
        batch=draw(st.integers(1, 2)),
        tokens=sum(chunks),
        seed=draw(st.integers(0, 2**16)),
        dtype=draw(st.sampled_from(CACHE_DTYPES)),
        start=prefix,
        chunks=chunks,
        encoder=draw(st.sampled_from(ENCODERS)),
    )


def near_cache_cases(component: Component) -> st.SearchStrategy:
    """Cache cases whose prefix stays within ``NEAR``: for checks that attend over every position."""
    return cache_cases(component, far=NEAR)
