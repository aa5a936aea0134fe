"""A reader never sees a mixed checkpoint: loading while another process replaces it again and again.

Before pinned reads, a load took the manifest from one save and the weights from the next ("sha256 differs
from the manifest: the file is corrupt", 551 of 3,241 loads), or found a file of the old tree already deleted.
Two processes race here for a few seconds: a writer replacing the checkpoint in a loop (two models in turn,
so consecutive saves differ in every tensor) and a reader loading it in a loop. Every load must succeed.
"""

from __future__ import annotations

import json

import blockspec
from blockspec.train.checkpointing import save_checkpoint
from blockspec.data.dataset import CharDataset
from blockspec.train.loop import Trainer, TrainConfig

from ..corpus import small_play
from .locks_children import Child, tiny_model

READER_SECONDS = 2.0  # after its first load; the writer replaces until the reader is done


def test_loads_racing_a_writer_that_replaces_the_checkpoint_never_see_a_mixed_state(tmp_path):
    checkpoint = tmp_path / "ck"
    blockspec.save(tiny_model(1), checkpoint)
    reader_report = tmp_path / "reader.json"
    writer = Child("replace", str(checkpoint), str(reader_report), str(tmp_path / "writer.json"))
    reader = Child("load", str(checkpoint), str(READER_SECONDS), str(reader_report))
    assert reader.wait(timeout=120) == 0 and writer.wait(timeout=120) == 0
    written = json.loads((tmp_path / "writer.json").read_text())
    read = json.loads((tmp_path / "reader.json").read_text())
    assert written["other"] == [] and written["saved"] >= 10, written
    assert read["loads"] >= 10, read
    assert read["errors"] == 0, read
    blockspec.load(checkpoint)  # and what the writer left is whole


def test_a_resume_racing_a_writer_reads_weights_moments_and_history_of_one_save(tmp_path):
    """``load_checkpoint`` reads the model, training.json and the optimizer's file: all from one save, or a
    resumed run would continue silently from weights of one step and moments of another."""
    trainer = Trainer(tiny_model(3), CharDataset.from_text(small_play()), TrainConfig(steps=2, batch_size=4,
                                                                                      eval_every=0, eval_batches=1))
    saves = [tmp_path / "step-1", tmp_path / "step-2"]
    trainer.run(on_step=lambda t, _: save_checkpoint(saves[t.step - 1], t.checkpoint()))
    checkpoint, reader_report = tmp_path / "ck", tmp_path / "reader.json"
    save_checkpoint(checkpoint, trainer.checkpoint())
    writer = Child("replace-training", str(checkpoint), *map(str, saves), str(reader_report),
                   str(tmp_path / "writer.json"))
    reader = Child("resume", str(checkpoint), *map(str, saves), str(READER_SECONDS), str(reader_report))
    assert reader.wait(timeout=120) == 0 and writer.wait(timeout=120) == 0
    written = json.loads((tmp_path / "writer.json").read_text())
    read = json.loads(reader_report.read_text())
    assert written["saved"] >= 10 and read["reads"] >= 10, (written, read)
    assert read["mixed"] == 0, read
