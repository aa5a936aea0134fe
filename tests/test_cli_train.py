"""`blockspec train` and `blockspec generate` end to end, in process: output, files, and error lines."""

from __future__ import annotations

import io
import json

import pytest

from blockspec.cli import main
from blockspec.train.progress import Progress

from .corpus import small_play
from .specs import spec_text

SPEC = spec_text(name="micro-{positional}", vocab_size=64, context_length=32, d_model=32, n_layers=2, n_heads=4,
                 d_ff=64, positional="{positional}")
FAST = ["--batch-size", "8", "--eval-batches", "2", "--lr", "1e-2"]


@pytest.fixture
def files(tmp_path):
    for positional in ("learned", "rope"):
        (tmp_path / f"{positional}.toml").write_text(SPEC.format(positional=positional))
    (tmp_path / "play.txt").write_text(small_play())
    return tmp_path


def train(files, *args, spec="learned"):
    return main(["train", str(files / f"{spec}.toml"), "--data", str(files / "play.txt"), *FAST, *args])


def json_out(capsys) -> dict:
    return json.loads(capsys.readouterr().out)


def test_train_json_is_the_whole_output_indented(files, capsys):
    assert train(files, "--steps", "6", "--eval-every", "3", "--json") == 0
    captured = capsys.readouterr()
    summary = json.loads(captured.out)
    assert captured.out.startswith('{\n  "steps": 6,')
    assert {"steps", "train_loss", "val_loss", "tokens_per_s", "seconds"} <= summary.keys()
    assert summary["steps"] == 6 and summary["tokens_per_s"] > 0 and summary["val_loss"] < 4.2
    assert captured.err == ""  # no progress bar when stderr is not a terminal


def test_train_prints_evaluations_and_writes_checkpoint_and_plot(files, capsys):
    assert train(files, "--steps", "4", "--eval-every", "2", "--out", str(files / "ckpt"),
                 "--plot", str(files / "loss.png")) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[1] for line in lines[:2]] == ["2/4", "4/4"]
    assert lines[-1].startswith("done: 4 steps")
    assert (files / "loss.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (files / "ckpt" / "model.safetensors").is_file()


def test_resume_continues_the_step_count_and_reproduces_the_losses(files, capsys):
    assert train(files, "--steps", "6", "--eval-every", "3", "--json") == 0
    uninterrupted = json_out(capsys)
    assert train(files, "--steps", "3", "--eval-every", "3", "--out", str(files / "ckpt"), "--json") == 0
    capsys.readouterr()
    assert train(files, "--steps", "6", "--resume", str(files / "ckpt"), "--json") == 0
    resumed = json_out(capsys)
    assert resumed["steps"] == 6
    assert (resumed["train_loss"], resumed["val_loss"]) == (uninterrupted["train_loss"], uninterrupted["val_loss"])


@pytest.mark.parametrize("spec", ["learned", "rope"])
def test_generate_continues_the_prompt_and_the_cache_changes_nothing(files, capsys, spec):
    assert train(files, "--steps", "30", "--out", str(files / "ckpt"), "--quiet", spec=spec) == 0
    capsys.readouterr()
    outputs = []
    for extra in ([], ["--no-cache"]):
        assert main(["generate", str(files / "ckpt"), "--prompt", "ROMEO:", "--temperature", "0",
                     "--max-new-tokens", "20", "--json", *extra]) == 0
        outputs.append(json_out(capsys)["text"])
    assert outputs[0] == outputs[1] and outputs[0].startswith("ROMEO:") and len(outputs[0]) == 26
    assert main(["generate", str(files / "ckpt"), "--prompt", "LADY ", "--seed", "1"]) == 0
    sampled = capsys.readouterr().out
    assert sampled.startswith("LADY ") and len(sampled) - 1 == 205  # print adds one newline; learned slides
    if spec == "learned":  # context 32: a longer prompt slides too, unless told to refuse
        assert main(["generate", str(files / "ckpt"), "--prompt", "ROMEO: " * 6, "--max-new-tokens", "5",
                     "--temperature", "0"]) == 0
        assert len(capsys.readouterr().out) - 1 == 47
        assert main(["generate", str(files / "ckpt"), "--prompt", "LADY ", "--overflow", "error", "--temperature", "0",
                     "--json"]) == 0
        assert json_out(capsys)["new_tokens"] == 27


def test_errors_are_single_lines_with_the_fix(files, capsys):
    assert train(files, "--steps", "1", "--out", str(files / "ckpt"), "--quiet") == 0
    capsys.readouterr()
    cases = [
        (["train", str(files / "learned.toml"), "--data", str(files / "missing.txt")], "missing.txt: cannot read"),
        (["train", str(files / "learned.toml"), "--data", str(files / "play.txt"), "--batch-size", "0"],
         "--batch-size: expected an integer from 1 to 1_048_576, found '0'"),
        (["train", str(files / "rope.toml"), "--data", str(files / "play.txt"), "--resume", str(files / "ckpt")],
         "was trained from a different spec"),
        (["generate", str(files / "ckpt"), "--prompt", "a", "--max-new-tokens", "40", "--overflow", "error"],
         "ask for at most 31 new tokens, let generation slide"),
        (["generate", str(files / "ckpt"), "--prompt", "a" * 40, "--overflow", "error"],
         "the prompt is too long: shorten it to at most 31 tokens"),
        (["generate", str(files / "ckpt"), "--prompt", "Zebra#"], "--prompt: character '#' at position 5 is not in"),
        (["generate", str(files / "nowhere"), "--prompt", "a"], "nowhere: no such checkpoint directory"),
    ]
    for argv, message in cases:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith("blockspec: error: ") and message in err and "Traceback" not in err, err


def test_too_many_characters_for_the_vocabulary(files, capsys):
    (files / "wide.txt").write_text("".join(chr(0x100 + i) for i in range(100)) * 20)
    assert main(["train", str(files / "learned.toml"), "--data", str(files / "wide.txt")]) == 2
    assert "has 100 distinct characters, but the spec's $.model.vocab_size is 64" in capsys.readouterr().err


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_progress_bar_draws_only_on_a_terminal():
    terminal, pipe = FakeTerminal(), io.StringIO()
    for stream in (terminal, pipe):
        bar = Progress(total=3, stream=stream, min_interval=0)
        bar.update(loss=2.5, tokens_per_s=1234.0)
        bar.close()
    assert "loss 2.5000" in terminal.getvalue() and "1,234 tok/s" in terminal.getvalue()
    assert pipe.getvalue() == ""
    quiet = FakeTerminal()
    Progress(total=3, stream=quiet, enabled=False).update(loss=1.0, tokens_per_s=1.0)
    assert quiet.getvalue() == ""
