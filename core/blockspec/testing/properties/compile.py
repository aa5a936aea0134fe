"""``compiles``: ``torch.compile(fullgraph=True)`` traces the component's forward and backward in one graph.

Training compiles the model; a graph break (a Python branch on a tensor's value) or a host sync
(``.item()``, ``.tolist()``, ``bool(tensor)``) splits the graph and stalls the device at every step. Under
``fullgraph=True`` either one raises instead of falling back to eager, so the check is one compiled training
step: the ``aot_eager`` backend traces forward and backward through AOTAutograd without generating code, which
keeps it to a fraction of a second on the CPU.
"""

from __future__ import annotations

import torch

from blockspec.registry.components import Component
from blockspec.testing.cases import Case
from blockspec.testing.harness import assume, build_isolated, fits, forward, inputs
from blockspec.testing.properties.base import Property

BACKEND = "aot_eager"  # traces forward and backward (AOTAutograd), compiles nothing: the graph is the question
COMPILE_SHARE = 0.08  # a compile costs 0.2-1 s: 2 examples at the default budget (25), 40 at --thorough


def check_compiles(component: Component, case: Case, device: str) -> None:
    """One training step (train mode, the drawn [model] dropout) through ``torch.compile(fullgraph=True)``:
    forward and backward trace with no graph break, and every output is finite."""
    module = build_isolated(component, case, device=device).module.train()
    assume(fits(module, case), f"{case.tokens} tokens do not fit max_positions={getattr(module, 'max_positions', None)}")
    tensors = tuple(t.requires_grad_() for t in inputs(component.kind, module, case, device))
    torch._dynamo.reset()  # each verdict its own: no graph, guard or recompile budget left by an earlier check
    step = torch.compile(lambda *given: forward(component.kind, module, case, given), fullgraph=True,
                         backend=BACKEND)
    found = step(*tensors)  # a graph break or host sync raises here (Property reports what dynamo says)
    for name, tensor in found.items():
        if tensor is not None and not bool(torch.isfinite(tensor).all()):
            raise AssertionError(f"compiled {name} is not finite for finite input")
    graded = [t.float().sum() for t in found.values() if t is not None and t.requires_grad]
    if graded:
        torch.stack(graded).sum().backward()


COMPILE = (
    Property(name="compiles", promise="compiles", check=check_compiles, share=COMPILE_SHARE, min_examples=1,
             weights="fresh", dtypes=("float32",),
             summary="torch.compile(fullgraph=True): forward and backward of a training step, no graph break"),
)
