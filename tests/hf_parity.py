"""The parity harness every Hugging Face family's tests share: one tiny random ``transformers`` model in,
the same logits out of blockspec, of its checkpoint, and of ``from_pretrained`` on blockspec's export.

A family's test builds a small model with ``tiny(...)`` (every parameter perturbed, norm weights and
biases included, so a missed (1 + w) or a dropped bias shows) and calls ``check_family``. Sequences are
longer than any sliding window of the config, and logits must agree within
``1e-4 · max(1, max |logits|)`` in float32 against transformers' eager attention. The config.json
helpers below (``structured``, ``refused``, ``counted``, ``export_count``) serve the released-config, refusal and
parameter-count tests every family has.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers")
transformers.logging.set_verbosity_error()

import blockspec  # noqa: E402
from blockspec.checkpoint.directory import load, save  # noqa: E402
from blockspec.errors import CheckpointError  # noqa: E402
from blockspec.interop import export_hf, import_hf  # noqa: E402
from blockspec.interop.families import family_for  # noqa: E402
from blockspec.interop.hf_config import spec_dict  # noqa: E402
from blockspec.interop.hf_dir import read_config  # noqa: E402
from blockspec.interop.hf_layout import carried_files  # noqa: E402
from blockspec.generation.tokens import generate  # noqa: E402

RELATIVE_TOLERANCE = 1e-4


def tiny(name: str, seed: int = 0, **config):
    """A random ``{name}ForCausalLM`` (e.g. "Qwen2") with eager attention, every parameter perturbed."""
    config_cls, model_cls = getattr(transformers, f"{name}Config"), getattr(transformers, f"{name}ForCausalLM")
    hf_config = config_cls(**config)
    hf_config._attn_implementation = "eager"
    torch.manual_seed(seed)
    return perturbed(model_cls(hf_config), seed)


def perturbed(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Every parameter random around its kind's neutral value: 1 for vectors (norm weights), 0 otherwise."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in model.parameters():
            centre = 1.0 if parameter.ndim == 1 else 0.0
            parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.2 + centre)
    return model.eval()


def ids_for(model, length: int = 40, batch: int = 2) -> torch.Tensor:
    return torch.randint(0, model.config.vocab_size, (batch, length), generator=torch.Generator().manual_seed(3))


def logits(model, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        out = model.eval()(ids)
    return out.logits if hasattr(out, "logits") else out


def bound(expected: torch.Tensor) -> float:
    return RELATIVE_TOLERANCE * max(1.0, expected.abs().max().item())


def assert_close(actual: torch.Tensor, expected: torch.Tensor, what: str) -> None:
    diff = (actual - expected).abs().max().item()
    assert diff <= bound(expected), f"{what}: max |Δlogits| = {diff:.3g} > {bound(expected):.3g}"


def check_family(hf_model, tmp_path: Path, registry, *, length: int = 40, export_cls=None):
    """Import, checkpoint, export and reload one model; returns the imported blockspec model.

    ``length`` must exceed every sliding window of the config. ``export_cls`` is the class that loads
    the export (default: the model's own), and its state dict must equal the original tensor for tensor.
    """
    ids, source = ids_for(hf_model, length), tmp_path / "hf"
    hf_model.save_pretrained(source)
    expected = logits(hf_model, ids)
    imported = import_hf(source, registry=registry)
    assert_close(logits(imported, ids), expected, "import")
    reloaded = load(save(imported, tmp_path / "ckpt"), registry=registry)
    assert torch.equal(logits(reloaded, ids), logits(imported, ids))
    export_hf(reloaded, tmp_path / "export", base_config=read_config(source), extra_files=carried_files(source))
    back = (export_cls or type(hf_model)).from_pretrained(tmp_path / "export").eval()
    back.config._attn_implementation = "eager"
    assert_close(logits(back, ids), expected, "export")
    original, returned = hf_model.state_dict(), back.state_dict()
    assert original.keys() == returned.keys()
    assert [k for k in original if not torch.equal(original[k], returned[k])] == []
    check_cached_generation(imported, ids[:, :length // 2], length - length // 2)
    return imported


def check_import(hf_model, path: Path, registry, *, length: int = 40, what: str = "import"):
    """The checkpoint at ``path`` (``hf_model``'s, saved, then maybe rewritten as older transformers wrote it)
    imports with ``hf_model``'s logits; returns the imported model."""
    imported = import_hf(path, registry=registry)
    ids = ids_for(hf_model, length)
    assert_close(logits(imported, ids), logits(hf_model, ids), what)
    return imported


def as_older_transformers(path: Path, *drop: str, **keys) -> None:
    """Rewrite the config.json at ``path`` as older transformers wrote it: rope_parameters' rope_theta at the
    top level instead, the keys ``drop`` removed and ``keys`` set."""
    file = path / "config.json"
    config = json.loads(file.read_text())
    theta = (config.pop("rope_parameters", None) or {}).get("rope_theta")
    config = {**config, "rope_theta": theta, **keys}
    file.write_text(json.dumps({key: value for key, value in config.items() if key not in drop}))


def check_cached_generation(model, prompt: torch.Tensor, new_tokens: int) -> None:
    """Greedy decoding with the KV cache picks what decoding without it picks, step for step."""
    cached = generate(model, prompt, max_new_tokens=new_tokens, temperature=0.0)
    uncached = generate(model, prompt, max_new_tokens=new_tokens, temperature=0.0, use_cache=False)
    assert torch.equal(cached, uncached)


def check_swaps_are_caught(imported, hf_model, length: int = 40) -> None:
    """The parity bound is sharp: swapping any two same-shaped tensors of the imported model (as a mapping
    that confused them would) moves its logits outside the bound."""
    ids = ids_for(hf_model, length)
    expected = logits(hf_model, ids)
    state = {name: p for name, p in imported.named_parameters()}
    by_shape: dict[tuple[int, ...], list[str]] = defaultdict(list)
    for name, parameter in state.items():
        by_shape[tuple(parameter.shape)].append(name)
    for names in by_shape.values():
        for first, second in zip(names, names[1:]):
            with _swapped(state[first], state[second]):
                diff = (logits(imported, ids) - expected).abs().max().item()
            assert diff > bound(expected), f"swapping {first} and {second} went unnoticed ({diff:.3g})"


class _swapped:
    def __init__(self, a: torch.Tensor, b: torch.Tensor) -> None:
        self.a, self.b = a, b

    def __enter__(self) -> None:
        self._exchange()

    def __exit__(self, *exc) -> None:
        self._exchange()

    def _exchange(self) -> None:
        with torch.no_grad():
            kept = self.a.detach().clone()
            self.a.copy_(self.b)
            self.b.copy_(kept)


# ---------------------------------------------------------------- config.json helpers


def structured(config: dict, registry) -> blockspec.ModelSpec:
    """The spec ``config`` (a config.json as a dict) imports as; CheckpointError if it cannot."""
    return blockspec.structure_spec(spec_dict(config, file="config.json", name="m"), registry)


def refused(config: dict) -> str:
    """The CheckpointError message reading ``config`` gives (the test fails if it imports)."""
    with pytest.raises(CheckpointError) as caught:
        spec_dict(config, file="config.json", name="m")
    return str(caught.value)


def hf_count(prefix: str, config: dict) -> int:
    """transformers' own parameter count of ``{prefix}ForCausalLM`` for ``config``, built on the meta device;
    a tied head is one Parameter, counted once."""
    hf_config = getattr(transformers, f"{prefix}Config").from_dict(config)
    with torch.device("meta"):
        model = getattr(transformers, f"{prefix}ForCausalLM")(hf_config)
    return sum(p.numel() for p in model.parameters())


def counted(prefix: str, config: dict, registry) -> tuple[blockspec.ModelSpec, int]:
    """The spec ``config`` imports as, and its parameter count, checked equal to transformers' own count of
    ``{prefix}ForCausalLM`` for ``config``."""
    spec = structured(config, registry)
    count = blockspec.count_parameters(spec, registry).exact
    assert count == hf_count(prefix, config)
    return spec, count


def export_count(spec: blockspec.ModelSpec, family_name: str, prefix: str, registry) -> int:
    """``spec`` exports as ``family_name``, whose ``{prefix}ForCausalLM`` transformers counts as blockspec counts
    the spec; returns that count."""
    family = family_for(spec)
    assert family.name == family_name
    count = blockspec.count_parameters(spec, registry).exact
    assert hf_count(prefix, family.config_json(spec)) == count
    return count
