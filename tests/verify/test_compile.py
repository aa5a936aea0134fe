"""torch.compile(fullgraph=True) traces every example spec's family with no graph break (slow: opt-in)."""

from __future__ import annotations

import pytest
import torch

import blockspec

pytestmark = pytest.mark.slow

SMALL = {"vocab_size": 32, "context_length": 16, "d_model": 32, "n_layers": 2, "n_heads": 4, "d_ff": 64}
FAMILIES = [
    ("learned", "layernorm", "gelu", "lm", {}),
    ("sinusoidal", "layernorm", "relu", "lm", {"norm_placement": "post"}),
    ("rope", "rmsnorm", "swiglu", "lm", {"n_kv_heads": 2, "bias": False}),
    ("alibi", "scalenorm", "squared_relu", "lm", {}),
]


def _spec(registry, positional, norm, activation, head, extra):
    model = "\n".join(f"{k} = {v!r}".replace("'", '"').replace("False", "false") for k, v in {**SMALL, **extra}.items())
    text = (f"[model]\n{model}\n[positional]\nuse = \"{positional}\"\n[norm]\nuse = \"{norm}\"\n"
            f"[activation]\nuse = \"{activation}\"\n[head]\nuse = \"{head}\"\n")
    return blockspec.loads_spec(text, registry)


@pytest.mark.parametrize("family", FAMILIES, ids=[f[0] for f in FAMILIES])
def test_compiles_with_no_graph_break(registry, family):
    if family[0] not in registry.names("positional"):
        pytest.skip(f"{family[0]} is not installed")
    model = blockspec.build(_spec(registry, *family), registry=registry, seed=0).eval()
    ids = torch.randint(32, (2, 12), generator=torch.Generator().manual_seed(0))
    compiled = torch.compile(model, fullgraph=True)  # a graph break raises instead of falling back
    with torch.no_grad():
        assert torch.allclose(compiled(ids), model(ids), atol=1e-4)
