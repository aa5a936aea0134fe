"""Training: the data split, seeded batches, determinism, resume, and checkpoints on disk."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

import blockspec
from blockspec.errors import CheckpointError
from blockspec.train.checkpointing import load_checkpoint, load_model, save_checkpoint
from blockspec.data.dataset import CharDataset, DataError, batch_seed
from blockspec.train.distributed import DistributedError, World
from blockspec.train.loop import Trainer, TrainConfig, TrainConfigError, make_config

from .corpus import small_play
from .specs import spec_text

pytestmark = pytest.mark.usefixtures("one_thread")  # micro models: see conftest


SPEC = spec_text(name="micro", vocab_size=64, context_length=16, d_model=32, n_layers=2, n_heads=4, d_ff=64,
                 positional="{positional}", tied=True)


@pytest.fixture(scope="module")
def data():
    return CharDataset.from_text(small_play())


def micro_trainer(registry, data, positional="learned", **settings):
    spec = blockspec.loads_spec(SPEC.format(positional=positional), registry)
    config = TrainConfig(**{"steps": 6, "batch_size": 8, "eval_every": 3, "eval_batches": 2, **settings})
    return Trainer(blockspec.build(spec, registry=registry, seed=config.seed), data, config)


def test_the_split_is_the_first_ninety_percent_and_the_rest():
    data = CharDataset.from_text("abcdefghij" * 10)
    assert len(data.splits["train"]) == 90 and len(data.splits["val"]) == 10
    assert data.tokenizer.decode(data.splits["val"].tolist()) == "abcdefghij"


def test_a_batch_is_windows_and_their_next_characters(data):
    x, y = data.batch("train", size=5, length=16, seed=3)
    assert x.shape == y.shape == (5, 16)
    assert torch.equal(x[:, 1:], y[:, :-1])
    again_x, _ = data.batch("train", size=5, length=16, seed=3)
    assert torch.equal(x, again_x)
    assert not torch.equal(x, data.batch("train", size=5, length=16, seed=4)[0])
    assert batch_seed(0, "train", 1) != batch_seed(0, "train", 2) != batch_seed(1, "train", 1)


def test_text_the_model_cannot_hold_is_refused_with_the_fix():
    with pytest.raises(DataError, match=r"has 26 distinct characters, .*vocab_size is 20; raise vocab_size to at least 26"):
        CharDataset.from_text("abcdefghijklmnopqrstuvwxyz" * 10).check_fits(20, 8)
    with pytest.raises(DataError, match=r"holds 30 characters; .*needs 17 in each split.*at least 161 characters"):
        CharDataset.from_text("ab" * 15).check_fits(65, 16)
    with pytest.raises(DataError, match=r"<text>: character 'q'"):
        CharDataset.from_text("quill", blockspec_tokenizer("abc"))


def blockspec_tokenizer(chars):
    from blockspec.data.tokenizer import CharTokenizer

    return CharTokenizer(chars)


def test_bad_settings_name_the_setting_not_a_flag():
    with pytest.raises(TrainConfigError, match=r"^training settings: \$\.batch_size: expected a positive integer, found 0"):
        make_config({"batch_size": 0})
    with pytest.raises(TrainConfigError, match=r"^training settings: \$\.lr: expected a number > 0.0"):
        make_config({"lr": 0.0})


def test_training_settings_go_through_the_strict_converter():
    """No coercion, unknown settings with a did-you-mean, the source named: as every document."""
    with pytest.raises(TrainConfigError, match=r"\$\.steps: expected an integer, found str '5'"):
        make_config({"steps": "5"})
    with pytest.raises(TrainConfigError, match=r"run/training\.json: \$\.stesp: unknown key 'stesp'; did you mean 'steps'"):
        make_config({"stesp": 5}, source="run/training.json")
    with pytest.raises(TrainConfigError) as caught:
        make_config({"batch_size": 0, "lr": -1.0})
    assert len(str(caught.value).splitlines()) == 2  # every bad value at once


def test_a_global_batch_splits_evenly_over_ranks_or_says_why():
    batch = torch.arange(12).view(6, 2)  # (B, N)
    shards = [World(rank=r, size=3).shard(batch) for r in range(3)]
    assert torch.equal(torch.cat(shards), batch)
    with pytest.raises(DistributedError, match="divisible by 4"):
        World(rank=0, size=4).shard(batch)


def test_the_same_seed_gives_the_same_losses_and_another_seed_others(registry, data):
    first = micro_trainer(registry, data).run()
    second = micro_trainer(registry, data).run()
    other = micro_trainer(registry, data, seed=1).run()
    assert first.train == second.train and first.evals == second.evals
    assert first.train != other.train
    assert [e.step for e in first.evals] == [3, 6]


def test_training_lowers_the_loss(registry, data):
    trainer = micro_trainer(registry, data, steps=40, eval_every=0, eval_batches=4, lr=1e-2)
    before = trainer.evaluate().val_loss
    trainer.run()
    assert trainer.history.evals[-1].val_loss < before - 0.7  # from ~ln(64) = 4.2 toward the text's structure


@pytest.mark.parametrize("positional", ["learned", "rope"])
def test_resuming_from_a_checkpoint_reproduces_the_uninterrupted_run(registry, data, tmp_path, positional):
    uninterrupted = micro_trainer(registry, data, positional)
    uninterrupted.run()
    first = micro_trainer(registry, data, positional, steps=3)
    first.run()
    save_checkpoint(tmp_path / "ckpt", first.checkpoint())
    checkpoint = load_checkpoint(tmp_path / "ckpt", registry)
    resumed = Trainer(blockspec.build(checkpoint.spec, registry=registry, seed=123), data,
                      TrainConfig(**{**checkpoint.training["config"], "steps": 6}), resume=checkpoint)
    assert resumed.step == 3
    resumed.run()
    assert resumed.history.train == uninterrupted.history.train
    assert resumed.history.evals == uninterrupted.history.evals
    for (name, a), (_, b) in zip(resumed.raw.state_dict().items(), uninterrupted.raw.state_dict().items()):
        assert torch.equal(a, b), name


def test_a_checkpoint_stores_the_tied_weight_once_and_loads_it_tied(registry, data, tmp_path):
    trainer = micro_trainer(registry, data, steps=2)
    trainer.run()
    path = save_checkpoint(tmp_path / "ckpt", trainer.checkpoint())
    assert sorted(p.name for p in path.iterdir()) == sorted(["manifest.json", "model.safetensors",
                                                             "optimizer.safetensors", "spec.toml", "tokenizer.json",
                                                             "training.json"])
    assert blockspec.load(path, registry=registry).head.weight is not None  # an ordinary blockspec checkpoint too
    stored = load_file(path / "model.safetensors")
    assert "embedding.weight" in stored and "head.weight" not in stored
    model, tokenizer = load_model(path, registry)
    assert model.head.weight is model.embedding.weight
    assert torch.equal(model.embedding.weight, trainer.raw.embedding.weight)
    assert tokenizer == data.tokenizer
    assert json.loads((path / "training.json").read_text())["step"] == 2


def test_a_second_save_replaces_the_first_and_leaves_nothing_beside_it(registry, data, tmp_path):
    trainer = micro_trainer(registry, data, steps=1)
    trainer.run()
    save_checkpoint(tmp_path / "ckpt", trainer.checkpoint())
    trainer.train_step()
    save_checkpoint(tmp_path / "ckpt", trainer.checkpoint(), overwrite=True)
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt"]
    assert load_checkpoint(tmp_path / "ckpt", registry).step == 2


def test_broken_checkpoints_are_clear_errors(registry, data, tmp_path):
    with pytest.raises(CheckpointError, match="no such checkpoint directory"):
        load_checkpoint(tmp_path / "missing", registry)
    trainer = micro_trainer(registry, data, steps=1)
    path = save_checkpoint(tmp_path / "ckpt", trainer.checkpoint())
    optimizer = (path / "optimizer.safetensors").read_bytes()
    (path / "optimizer.safetensors").write_bytes(optimizer[:-1] + bytes([optimizer[-1] ^ 1]))
    with pytest.raises(CheckpointError, match="optimizer.safetensors"):
        load_checkpoint(path, registry)
    plain = blockspec.save(trainer.raw, tmp_path / "plain")
    with pytest.raises(CheckpointError, match="is not a training checkpoint"):
        load_checkpoint(plain, registry)


def test_weights_that_do_not_fit_the_spec_are_refused(registry, data, tmp_path):
    import attrs

    checkpoint = micro_trainer(registry, data, steps=1).checkpoint()
    state = dict(checkpoint.model_state)
    del state["final_norm.bias"]
    with pytest.raises(CheckpointError, match=r"missing \['final_norm.bias'\]"):
        save_checkpoint(tmp_path / "ckpt", attrs.evolve(checkpoint, model_state=state))
    state = dict(checkpoint.model_state, **{"blocks.0.ffn.up.weight": torch.zeros(3, 3)})
    with pytest.raises(CheckpointError, match=r"blocks.0.ffn.up.weight: expected shape \(64, 32\), found \(3, 3\)"):
        save_checkpoint(tmp_path / "ckpt", attrs.evolve(checkpoint, model_state=state))
