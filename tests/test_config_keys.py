"""Nothing in a config.json is silently ignored: change any one key, and the import either refuses the
config at a key it cannot express (the changed one, or one the change contradicts: a new hidden_size
beside an old head_dim) or computes what transformers computes for the changed config.

For every family in FAMILIES, each scalar key of the config transformers writes for the family's example
(defaults included) is changed in turn; transformers builds the changed model (a change it cannot build
is skipped: no checkpoint can have it), and blockspec imports it.
"""

from __future__ import annotations

import pytest
import torch

from blockspec.errors import CheckpointError
from blockspec.interop import import_hf
from blockspec.interop.config_reader import INERT
from blockspec.interop.families import FAMILIES

from .hf_parity import assert_close, ids_for, logits, perturbed, transformers
from .test_families import EXAMPLES

NAMES = [family.name for family in FAMILIES]
LENGTH = 40  # longer than any window a change below can set


def changes(value):
    """Candidate new values for one config value, the most telling first."""
    if isinstance(value, bool):
        return [not value]
    if isinstance(value, int):
        return [value * 2, value + 1, max(value // 2, 1)]
    if isinstance(value, float):
        return [value * 1.5 + 0.01] if value else [0.125]
    if value is None:
        return [8, 0.5, True]
    return []


def full_config(name: str) -> dict:
    config = dict(EXAMPLES[name])
    model_type = config.pop("model_type")
    config.pop("architectures", None)
    return transformers.AutoConfig.for_model(model_type, **config).to_dict()


def changed_model(config: dict):
    """transformers' model for a changed config, or None when transformers refuses or cannot run it."""
    try:
        hf_config = transformers.AutoConfig.for_model(**config)
        hf_config._attn_implementation = "eager"
        model = perturbed(transformers.AutoModelForCausalLM.from_config(hf_config), seed=1)
        expected = logits(model, ids_for(model, LENGTH))
    except Exception:  # any refusal of transformers' own: such a config.json cannot come with weights
        return None, None
    return model, expected


def keys_of(name: str) -> list[str]:
    config = full_config(name)
    return [k for k, v in config.items() if k not in INERT and changes(v)]


CASES = [(name, key) for name in NAMES for key in keys_of(name)]


@pytest.mark.parametrize(("name", "key"), CASES, ids=[f"{n}-{k}" for n, k in CASES])
def test_a_changed_key_is_refused_at_its_key_or_computed_alike(name, key, tmp_path, registry):
    base = full_config(name)
    for value in changes(base[key]):
        model, expected = changed_model({**base, key: value})
        if model is None:
            continue
        model.save_pretrained(tmp_path / str(value))
        try:
            imported = import_hf(tmp_path / str(value), registry=registry)
        except CheckpointError as error:
            assert ": $." in str(error), f"{key} = {value!r}: a refusal names the key it cannot express: {error}"
            return
        assert_close(logits(imported, ids_for(model, LENGTH)), expected, f"{key} = {value!r}")
        return
    pytest.skip(f"transformers builds no model with {key} changed")
