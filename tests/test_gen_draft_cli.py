"""Issue 25, ``blockspec generate --draft SOURCE --draft-tokens K``: speculative decoding from the command line."""

from __future__ import annotations

import json

import pytest

import blockspec
from blockspec.data.tokenizer import train_bpe, tokenizer_bytes

from .corpus import small_play
from .specs import spec_text
from .test_gen_stops import NEW, make_tiny, run

pytest.importorskip("tokenizers")
pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, registry):
    made = make_tiny(tmp_path_factory.mktemp("draft"), registry)
    root = made["root"]
    other = train_bpe(iter([small_play(120)]), 290)  # another tokenizer
    made["other_ckpt"] = _saved(root / "other", registry, 300, {"tokenizer.json": tokenizer_bytes(other)})
    made["small_ckpt"] = _saved(root / "small", registry, 256, {})  # no tokenizer, fewer ids than the model's
    return made


def _saved(folder, registry, vocab: int, files: dict):
    folder.mkdir()
    (folder / "spec.toml").write_text(spec_text(name="draft", vocab_size=vocab, context_length=64, d_model=16,
                                                n_layers=1, n_heads=2, d_ff=32))
    model = blockspec.build(blockspec.load_spec(folder / "spec.toml", registry), registry=registry, seed=2)
    return blockspec.save(model, folder / "ckpt", extra_files=files)


def generated(capsys, tiny, *flags) -> dict:
    code, out, err = run(capsys, "generate", tiny["root"] / "ckpt", "--prompt", "the", "--max-new-tokens", NEW,
                         "--temperature", "0", "--no-eos", *flags, "--json")
    assert code == 0, err
    return json.loads(out)


def test_the_model_as_its_own_draft_gives_its_text_with_every_draft_accepted(tiny, capsys):
    plain = generated(capsys, tiny)
    drafted = generated(capsys, tiny, "--draft", tiny["root"] / "ckpt", "--draft-tokens", "3")
    assert drafted.pop("draft")["acceptance_rate"] == 1.0
    assert drafted == plain


def test_without_json_the_acceptance_is_a_note_on_stderr(tiny, capsys):
    code, out, err = run(capsys, "generate", tiny["root"] / "ckpt", "--prompt", "the", "--max-new-tokens", "6",
                         "--draft", tiny["root"] / "ckpt")
    assert code == 0 and out.startswith("the")
    assert err.startswith("blockspec: note: --draft ") and "100.0% of" in err and "drafted tokens accepted" in err


@pytest.mark.parametrize("draft, flags, message", [
    ("other_ckpt", [], ("--draft ", "its tokenizer (", "is not the model's")),
    ("small_ckpt", [], ("--draft: expected a draft with the target's vocabulary (at least the 300 ids",)),
    ("ckpt", ["--num-samples", "2"], ("--num-samples: expected 1 with a draft model",)),
    ("ckpt", ["--no-cache"], ("--no-cache: expected True with a draft model",)),
    ("ckpt", ["--draft-tokens", "0"], ("--draft-tokens: expected a positive integer",)),
])
def test_a_draft_the_model_cannot_use_is_one_line_before_any_work(tiny, capsys, draft, flags, message):
    path = tiny["root"] / "ckpt" if draft == "ckpt" else tiny[draft]
    code, out, err = run(capsys, "generate", tiny["root"] / "ckpt", "--prompt", "the", "--draft", path, *flags)
    assert code == 2 and not out and len(err.strip().splitlines()) == 1
    assert all(part in err for part in message), err
