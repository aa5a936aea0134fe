"""A model's tensors as a file holds them: unique storage only, checked name by name on the way in.

A tied head *is* the embedding matrix (one Parameter). safetensors refuses aliased tensors,
so only the first name of each storage is written; on load the builder has already tied
them, so filling the first name fills both.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping

import torch
from torch import nn

from blockspec.errors import CheckpointError
from blockspec.checkpoint.safetensors_file import SafetensorsHeader, torch_dtype


def unique_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """state_dict without aliases: the first name of each shared tensor is kept."""
    seen: set[tuple] = set()
    state = {}
    for name, tensor in model.state_dict(keep_vars=True).items():  # Parameters themselves: ties stay visible
        key = _identity(tensor)
        if key in seen:
            continue
        seen.add(key)
        state[name] = tensor
    return state  # Parameters and buffers, not copies: writing into them fills the model


def fill(model: nn.Module, tensors: Iterable[tuple[str, torch.Tensor]], *, source: str = "weights") -> None:
    """Copy named tensors into the model's own parameters and persistent buffers, cast to their dtype.

    The one way a model is filled from named tensors: a weights file, a Hugging Face import, a
    training state. Each caller checks names and shapes against its source first (``check_shapes``,
    and ``check_dtypes`` where the dtypes are known before the bytes); ``tensors`` may be a generator,
    so a converted tensor lives only until it is copied. The cast only ever changes a width: a tensor
    of another kind (integers into a float parameter) is refused, naming ``source`` and the tensor. A
    checkpoint directory's file is read straight into the same tensors, verified on the way
    (``verified_weights``).
    """
    targets = model.state_dict(keep_vars=True)  # Parameters themselves: copying into them fills the model
    with torch.no_grad():
        for name, tensor in tensors:
            check_dtypes({name: targets[name].dtype}, {name: tensor.dtype}, source)
            targets[name].copy_(tensor)


def tied_aliases(model: nn.Module) -> dict[str, str]:
    """State-dict names that repeat a tensor already listed -> that first name
    (a tied head: {"head.weight": "embedding.weight"})."""
    first: dict[int, str] = {}
    aliases = {}
    for name, tensor in model.state_dict(keep_vars=True).items():
        if id(tensor) in first:
            aliases[name] = first[id(tensor)]
        else:
            first[id(tensor)] = name
    return aliases


def _identity(tensor: torch.Tensor) -> tuple:
    if tensor.device.type == "meta":
        return (id(tensor),)  # meta tensors have no storage to compare
    return (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape), tensor.stride())


def owner_of(model: nn.Module, name: str) -> str:
    """'blocks.0.attn.qkv.weight' -> ' (attention:causal from blockspec)': the component that made it."""
    provenance = getattr(model, "provenance", {}) or {}
    module = name
    while module:
        module = module.rpartition(".")[0]
        component = provenance.get(module)
        if component is not None:
            return f" ({component.kind}:{component.name} from {component.distribution})"
    return ""


def check_shapes(
    expected: Mapping[str, tuple[int, ...]],
    found: Mapping[str, tuple[int, ...]],
    file: str,
    describe: Callable[[str], str] = lambda name: "",
) -> None:
    """Every missing, unexpected and mis-shaped tensor, in one CheckpointError.

    ``describe`` adds context to a tensor name: its component, or what it maps to.
    """
    lines = [f"{file}: tensor {n!r}{describe(n)}: missing, expected shape {list(expected[n])}"
             for n in expected if n not in found]
    lines += [f"{file}: tensor {n!r}: unexpected (the model has no such parameter or buffer)"
              for n in found if n not in expected]
    lines += [f"{file}: tensor {n!r}{describe(n)}: expected shape {list(expected[n])}, found {list(found[n])}"
              for n in expected if n in found and tuple(found[n]) != tuple(expected[n])]
    if lines:
        raise CheckpointError("\n".join(lines))


def check_dtypes(
    expected: Mapping[str, torch.dtype],
    found: Mapping[str, torch.dtype | str],
    file: str,
    describe: Callable[[str], str] = lambda name: "",
) -> None:
    """Every tensor whose numbers would change meaning when cast into its target, in one CheckpointError.

    ``found`` holds torch dtypes, or a file's own dtype names ("I64"), which the message keeps. A cast
    between widths of one kind (float16 into float32) keeps the meaning; across kinds (integers,
    booleans or complex numbers into a float) ``copy_`` would change it silently.
    """
    lines = [f"{file}: tensor {n!r}{describe(n)}: {misfit}" for n in expected if n in found
             if (misfit := dtype_misfit(expected[n], found[n])) is not None]
    if lines:
        raise CheckpointError("\n".join(lines))


def dtype_misfit(expected: torch.dtype, found: torch.dtype | str) -> str | None:
    """"expected a floating dtype like float32, found I64" when a cast would change what the numbers mean."""
    if dtype_kind(expected) == dtype_kind(_torch_dtype(found)):
        return None
    article = "an" if dtype_kind(expected) == "integer" else "a"
    return f"expected {article} {dtype_kind(expected)} dtype like {_dtype_name(expected)}, found {_dtype_name(found)}"


def dtype_kind(dtype: torch.dtype) -> str:
    """What a dtype's numbers mean, whatever their width: "floating", "complex", "bool" or "integer"."""
    if dtype == torch.bool:
        return "bool"
    if dtype.is_complex:
        return "complex"
    return "floating" if dtype.is_floating_point else "integer"


def _dtype_name(dtype: torch.dtype | str) -> str:
    return dtype if isinstance(dtype, str) else str(dtype).removeprefix("torch.")


def _torch_dtype(dtype: torch.dtype | str) -> torch.dtype:
    return torch_dtype(dtype) if isinstance(dtype, str) else dtype


def header_dtypes(header: SafetensorsHeader) -> dict[str, str]:
    """A safetensors file's dtypes as it names them ("F32", "I64"), for ``check_dtypes``."""
    return {name: entry.dtype for name, entry in header.entries.items()}


COMPUTE_DTYPES = (torch.float64, torch.float32, torch.float16, torch.bfloat16)  # float8 stores, but cannot compute


def common_float_dtype(dtypes: list[torch.dtype]) -> torch.dtype:
    """The one floating dtype a model is built in for a file's tensors; float32 when they disagree or there is
    none. A file of float8 tensors is built in float32, which holds each of their values exactly."""
    floats = {d for d in dtypes if d in COMPUTE_DTYPES}
    return floats.pop() if len(floats) == 1 else torch.float32


def check_layer_count(names: Iterable[str], pattern: str, n_layers: int, file: str, spec_file: str) -> None:
    """Refuse a spec with more layers than the file holds, before building anything.

    A hostile spec can ask for a billion layers; the weights file says how many there are,
    and checking first keeps every load bounded by the size of the file.
    """
    found = {int(match.group(1)) for name in names if (match := re.search(pattern, name))}
    if n_layers > len(found):  # fewer layers, or stray ones, are reported tensor by tensor later
        held = f"{len(found)} layers (indices {min(found)}..{max(found)})" if found else "no layers"
        raise CheckpointError(f"{spec_file}: n_layers = {n_layers}, but {file} holds the weights of {held}")


def build_on_meta(spec, registry, file: str) -> nn.Module:
    """The model a spec describes, without memory, to check a file against; a spec whose sizes
    cannot even be laid out (a 10^12-wide layer overflows) is the file's fault."""
    from blockspec.assembly.assemble import build
    from blockspec.errors import SpecError

    try:
        return build(spec, registry=registry, device="meta")
    except (RuntimeError, SpecError, OverflowError) as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise CheckpointError(f"{file}: cannot build the model it describes: {first:.200}") from None
