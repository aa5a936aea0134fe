"""``compiles``: ``torch.compile(fullgraph=True)`` traces the component's forward and backward in one graph.

Training compiles the model; a graph break (a Python branch on a tensor's value, ``bool(tensor)``) splits
the graph, and a host sync (``.item()``, ``.tolist()``) stalls the device at every step. Under
``fullgraph=True`` a break raises instead of falling back to eager; ``.item()`` is captured into the graph
(torch >= 2.6 traces it as an unbacked scalar), so the check's backend looks for it in the traced graph. The
check is one compiled training step: ``aot_eager`` traces forward and backward through AOTAutograd without
generating code, a fraction of a second on the CPU.
"""

from __future__ import annotations

import re

import torch

from blockspec.registry.components import Component
from blockspec.testing.cases import Case
from blockspec.testing.harness import assume, build_isolated, fits, forward, inputs
from blockspec.testing.properties.base import Property

BACKEND = "aot_eager"  # traces forward and backward (AOTAutograd), compiles nothing: the graph is the question
HOST_SYNCS = ("item", "tolist")  # captured into the graph under fullgraph (no break), yet each waits for the device
COMPILE_SHARE = 0.04  # a compile costs 0.2-1 s: 1 example at the default budget (25), 20 at --thorough


def check_compiles(component: Component, case: Case, device: str) -> None:
    """One training step (train mode, the drawn [model] dropout) through ``torch.compile(fullgraph=True)``:
    forward and backward trace with no graph break, and every output is finite."""
    module = build_isolated(component, case, device=device).module.train()
    assume(fits(module, case), f"{case.tokens} tokens do not fit max_positions={getattr(module, 'max_positions', None)}")
    tensors = tuple(t.requires_grad_() for t in inputs(component.kind, module, case, device))
    torch._dynamo.reset()  # each verdict its own: no graph, guard or recompile budget left by an earlier check
    syncs: list[str] = []
    step = torch.compile(lambda *given: forward(component.kind, module, case, given), fullgraph=True,
                         backend=_watching(syncs))
    found = step(*tensors)  # a graph break raises here (Property reports what dynamo says)
    if syncs:
        raise AssertionError(f"a host sync in the compiled forward, which waits for the device at every step "
                             f"(keep the value a tensor): {'; '.join(syncs)}")
    for name, tensor in found.items():
        if tensor is not None and not bool(torch.isfinite(tensor).all()):
            raise AssertionError(f"compiled {name} is not finite for finite input")
    graded = [t.float().sum() for t in found.values() if t is not None and t.requires_grad]
    if graded:
        torch.stack(graded).sum().backward()


def _watching(syncs: list[str]):
    """``BACKEND``, noting each host sync of the traced graph in ``syncs`` (with the source line it came from)."""
    from torch._dynamo.backends.registry import lookup_backend

    def backend(graph: torch.fx.GraphModule, example_inputs: list):
        for node in graph.graph.nodes:
            if node.op == "call_method" and node.target in HOST_SYNCS:
                syncs.append(f".{node.target}() in {_source_line(node.meta.get('stack_trace') or '')}")
        return lookup_backend(BACKEND)(graph, example_inputs)

    return backend


def _source_line(stack_trace: str) -> str:
    """The innermost frame of a traced node's stack trace: 'code (file:line)'."""
    frames = list(re.finditer(r'File "([^"]+)", line (\d+)[^\n]*\n\s*([^\n]*)', stack_trace))
    if not frames:
        return "the traced forward"
    path, line, code = frames[-1].groups()
    return f"{code.strip()} ({path.rsplit('/', 1)[-1]}:{line})"


COMPILE = (
    Property(name="compiles", promise="compiles", check=check_compiles, share=COMPILE_SHARE, min_examples=1,
             weights="fresh", dtypes=("float32",),
             summary="torch.compile(fullgraph=True): forward and backward of a training step, no graph break"),
)
