"""A reader never sees a mixed checkpoint: loading while another process replaces it again and again.

Before pinned reads, a load took the manifest from one save and the weights from the next ("sha256 differs
from the manifest: the file is corrupt", 551 of 3,241 loads), or found a file of the old tree already deleted.
Two processes race here for a few seconds: a writer replacing the checkpoint in a loop (two models in turn,
so consecutive saves differ in every tensor) and a reader loading it in a loop. Every load must succeed.
"""

from __future__ import annotations

import json

import blockspec

from .locks_children import loop_child, tiny_model

WRITER_SECONDS = 6.0
READER_SECONDS = 3.5


def test_loads_racing_a_writer_that_replaces_the_checkpoint_never_see_a_mixed_state(tmp_path):
    checkpoint = tmp_path / "ck"
    blockspec.save(tiny_model(1), checkpoint)
    writer = loop_child("replace", str(checkpoint), str(WRITER_SECONDS), str(tmp_path / "writer.json"))
    reader = loop_child("load", str(checkpoint), str(READER_SECONDS), str(tmp_path / "reader.json"))
    assert reader.wait(timeout=120) == 0 and writer.wait(timeout=120) == 0
    written = json.loads((tmp_path / "writer.json").read_text())
    read = json.loads((tmp_path / "reader.json").read_text())
    assert written["other"] == [] and written["saved"] >= 10, written
    assert read["loads"] >= 10, read
    assert read["errors"] == 0, read
    blockspec.load(checkpoint)  # and what the writer left is whole
