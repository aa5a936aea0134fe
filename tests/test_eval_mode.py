"""``eval_mode``: every submodule in eval mode inside the block, the model's own mode after it."""

from __future__ import annotations

import pytest
from torch import nn

from blockspec.generation.tokens import eval_mode


def _model() -> nn.Module:
    return nn.Sequential(nn.Linear(2, 2), nn.Dropout(0.5), nn.Sequential(nn.Dropout(0.1)))


@pytest.mark.parametrize("training", [True, False])
def test_every_submodule_is_in_eval_mode_inside_and_the_model_mode_comes_back(training):
    model = _model().train(training)
    with eval_mode(model):
        assert not any(m.training for m in model.modules())
    assert all(m.training == training for m in model.modules())


def test_a_submodule_left_in_training_mode_under_an_eval_root_is_switched_too():
    model = _model().eval()
    model[1].train()
    with eval_mode(model):
        assert not any(m.training for m in model.modules())
    assert not model.training


def test_the_mode_comes_back_when_the_block_raises():
    model = _model().train()
    with pytest.raises(RuntimeError), eval_mode(model):
        raise RuntimeError("scoring failed")
    assert all(m.training for m in model.modules())
