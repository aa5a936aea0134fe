"""A reader never sees a mixed checkpoint: loading while another process replaces it again and again.

Before pinned reads, a load took the manifest from one save and the weights from the next ("sha256 differs
from the manifest: the file is corrupt", 551 of 3,241 loads), or found a file of the old tree already deleted.
Two processes race here for a few seconds: a writer replacing the checkpoint in a loop (two models in turn,
so consecutive saves differ in every tensor) and a reader loading it in a loop. Every load must succeed.
"""

from __future__ import annotations

import json

import blockspec

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
