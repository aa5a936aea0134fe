"""Training's validation in bits per byte: a character model's, a prepared BPE dataset's, old checkpoints."""

from __future__ import annotations

import json
import math

import attrs
import pytest

import blockspec
from blockspec.cli import main
from blockspec.data.dataset import TRAIN_FRACTION, CharDataset
from blockspec.data.measure import decoded_size, streamed_size
from blockspec.data.prepared import META_FILE, PreparedDataset, prepare
from blockspec.data.tokenizer import train_bpe
from blockspec.train import run as training
from blockspec.train.checkpointing import load_checkpoint, save_checkpoint

from .corpus import small_play
from .specs import spec_text

pytestmark = pytest.mark.usefixtures("one_thread")

SETTINGS = {"steps": 4, "batch_size": 4, "eval_every": 2, "eval_batches": 2}
# two-, three- and four-byte characters, so that characters and bytes differ
TEXT = small_play(240).replace("o", "ö").replace("e", "€").replace("!", "😀")


def spec_file(tmp_path, vocab_size: int):
    path = tmp_path / "tiny.toml"
    path.write_text(spec_text(name="tiny", vocab_size=vocab_size, context_length=16, d_model=16, n_layers=1,
                              n_heads=2, d_ff=32))
    return path


def trained(tmp_path, data, vocab_size: int, out=None):
    run = training.plan(str(spec_file(tmp_path, vocab_size)), str(data), SETTINGS, registry=blockspec.load_registry(),
                        out=out)
    trainer = training.start(run, registry=blockspec.load_registry())
    return training.execute(run, trainer), trainer


@pytest.fixture
def text_file(tmp_path):
    path = tmp_path / "play.txt"
    path.write_text(TEXT, encoding="utf-8")
    return path


def test_a_character_models_bits_per_byte_is_its_loss_over_ln2_times_tokens_per_byte(tmp_path, text_file):
    outcome, _ = trained(tmp_path, text_file, vocab_size=64)
    validation = TEXT[int(len(TEXT) * TRAIN_FRACTION):]  # a character model: one token per character
    tokens, size = len(validation), len(validation.encode("utf-8"))
    assert size > tokens * 1.05  # the multi-byte characters are in the validation text
    for evaluation in outcome.history.evals:
        assert evaluation.val_bpb == pytest.approx(evaluation.val_loss / math.log(2) * tokens / size, rel=1e-12)


def test_train_prints_and_reports_it_in_json(tmp_path, text_file, capsys):
    common = [str(spec_file(tmp_path, 64)), "--data", str(text_file), "--steps", "2", "--batch-size", "4",
              "--eval-batches", "2", "--device", "cpu"]
    assert main(["train", *common, "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["val_bpb"] == pytest.approx(CharDataset.from_text(TEXT).split_size("val")[0] * summary["val_loss"]
                                               / math.log(2) / CharDataset.from_text(TEXT).split_size("val")[1].bytes)
    assert main(["train", *common]) == 0
    assert f"({summary['val_bpb']:.4f} bits/byte)" in capsys.readouterr().out


@pytest.fixture
def bpe_data(tmp_path, text_file):
    """A prepared dataset of TEXT with a byte-level BPE of 300 tokens."""
    tokenizer = train_bpe(iter([TEXT]), 300)
    prepare([text_file], tokenizer, tmp_path / "bpe")
    return tmp_path / "bpe"


def test_data_prepare_records_each_splits_bytes(bpe_data):
    meta = json.loads((bpe_data / META_FILE).read_text())
    assert meta["bytes"]["train"] + meta["bytes"]["val"] == len(TEXT.encode("utf-8"))  # one file, no separator
    assert meta["characters"]["train"] + meta["characters"]["val"] == len(TEXT)
    data = PreparedDataset(bpe_data)
    assert meta["bytes"]["val"] == decoded_size(data.tokenizer, data.splits["val"].tolist()).bytes


def test_a_bpe_datasets_bits_per_byte_uses_its_recorded_byte_count(tmp_path, bpe_data):
    meta = json.loads((bpe_data / META_FILE).read_text())
    meta["bytes"]["val"] *= 2  # the figure must follow the count meta.json records, not one it computes
    (bpe_data / META_FILE).write_text(json.dumps(meta))
    outcome, _ = trained(tmp_path, bpe_data, vocab_size=300)
    last = outcome.history.evals[-1]
    assert last.val_bpb == pytest.approx(last.val_loss / math.log(2) * meta["tokens"]["val"] / meta["bytes"]["val"])


def test_a_dataset_prepared_before_bytes_were_recorded_decodes_its_split_once(bpe_data):
    recorded = PreparedDataset(bpe_data).split_size("val")
    meta = json.loads((bpe_data / META_FILE).read_text())
    del meta["bytes"], meta["characters"]
    (bpe_data / META_FILE).write_text(json.dumps(meta))
    assert PreparedDataset(bpe_data).split_size("val") == recorded


def test_a_character_cut_between_two_blocks_counts_once():
    tokenizer = train_bpe(iter(["plain text " * 20]), 260)  # no merge holds '€' or '😀': each is 3 or 4 byte tokens
    ids = tokenizer.encode("a€b😀c" * 5)
    whole = decoded_size(tokenizer, ids)
    for width in (1, 2, 3, 5):
        assert streamed_size(tokenizer, [ids[i : i + width] for i in range(0, len(ids), width)]) == whole


def test_resuming_a_checkpoint_written_without_bits_per_byte(tmp_path, text_file):
    _, trainer = trained(tmp_path, text_file, vocab_size=64)
    old = trainer.checkpoint()
    history = old.training["history"]
    history["evals"] = [{k: v for k, v in e.items() if k != "val_bpb"} for e in history["evals"]]
    save_checkpoint(tmp_path / "old", attrs.evolve(old, training={**old.training, "history": history}))
    assert all("val_bpb" not in e for e in json.loads((tmp_path / "old/training.json").read_text())["history"]["evals"])
    assert load_checkpoint(tmp_path / "old", blockspec.load_registry()).step == 4
    run = training.plan(str(spec_file(tmp_path, 64)), str(text_file), {"steps": 6}, registry=blockspec.load_registry(),
                        resume=str(tmp_path / "old"), out=tmp_path / "old", replace_out=True)
    evals = training.execute(run, training.start(run, registry=blockspec.load_registry())).history.evals
    assert [e.step for e in evals] == [2, 4, 6]
    assert [e.val_bpb is None for e in evals] == [True, True, False]


def test_data_prepare_says_each_splits_bytes(tmp_path, text_file, capsys):
    assert main(["data", "prepare", str(text_file), "--tokenizer", "char", "--out", str(tmp_path / "d"), "--quiet"]) == 0
    meta = json.loads((tmp_path / "d" / META_FILE).read_text())
    assert f"({meta['bytes']['train']:,} and {meta['bytes']['val']:,} bytes of text;" in capsys.readouterr().out
