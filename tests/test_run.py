"""One training run (train/run.py): decided before step 1, executed without printing, kept at its cadence."""

from __future__ import annotations

import io

import pytest

from blockspec.train import run as training
from blockspec.train.checkpointing import load_checkpoint
from blockspec.data.dataset import DataError
from blockspec.train.loop import NotALanguageModelError
from blockspec.train.progress import Progress

from .corpus import small_play
from .specs import spec_text

pytestmark = pytest.mark.usefixtures("one_thread")  # micro models: see conftest

SETTINGS = {"steps": 5, "batch_size": 4, "eval_every": 2, "eval_batches": 2}


@pytest.fixture
def files(tmp_path):
    (tmp_path / "spec.toml").write_text(spec_text(name="micro", vocab_size=64, context_length=16, d_model=16,
                                                  n_layers=1, n_heads=2, d_ff=32))
    (tmp_path / "play.txt").write_text(small_play(200))
    return tmp_path


class Recorder:
    """A Listener that notes each step's loss and rate, each evaluation, and the checkpoint on disk at each step."""

    def __init__(self, out=None) -> None:
        self.steps, self.evaluations, self.saved, self.out = [], [], [], out

    def step(self, trainer, loss, meter) -> None:
        self.steps.append((trainer.step, loss, meter.tokens_per_s()))
        self.saved.append(load_checkpoint(self.out).step if self.out and self.out.exists() else None)

    def evaluation(self, trainer, evaluation, meter) -> None:
        self.evaluations.append(evaluation.step)


def plan_and_execute(files, registry, listener=None, **keeping):
    run = training.plan(str(files / "spec.toml"), str(files / "play.txt"), SETTINGS, registry=registry, **keeping)
    return run, training.execute(run, training.start(run, registry=registry), listener)


def test_a_run_trains_saves_at_its_cadence_and_never_prints(files, registry, capsys):
    out = files / "ckpt"
    recorder = Recorder(out)
    run, outcome = plan_and_execute(files, registry, recorder, out=out, checkpoint_every=2)
    assert capsys.readouterr() == ("", "")
    assert [s for s, _, _ in recorder.steps] == [1, 2, 3, 4, 5] and all(rate > 0 for _, _, rate in recorder.steps)
    assert recorder.saved == [None, None, 2, 2, 4]  # heard before each step's save; none after the last: the end
    assert recorder.evaluations == [2, 4, 5]
    assert load_checkpoint(out).step == 5 and outcome.checkpoint == out
    assert outcome.step == 5 and outcome.history.evals[-1].step == 5 and outcome.tokens_per_s > 0
    assert outcome.mfu is None and outcome.peak_flops is None  # no peak measured on a CPU


def test_a_resumed_run_continues_with_its_settings_and_counts_its_own_steps(files, registry):
    plan_and_execute(files, registry, out=files / "ckpt")
    run = training.plan(str(files / "spec.toml"), str(files / "play.txt"), {"steps": 7}, registry=registry,
                        resume=str(files / "ckpt"), out=files / "ckpt", replace_out=True)
    assert run.config.eval_every == 2 and run.resume is not None and run.weights is None  # its settings came with it
    recorder = Recorder()
    outcome = training.execute(run, training.start(run, registry=registry), recorder)
    assert [s for s, _, _ in recorder.steps] == [6, 7] and [e.step for e in outcome.history.evals] == [2, 4, 5, 6, 7]
    assert load_checkpoint(files / "ckpt").step == 7 and outcome.run_tokens_per_s > 0


def test_a_run_of_no_steps_still_says_where_the_model_stands(files, registry):
    run = training.plan(str(files / "spec.toml"), str(files / "play.txt"), {**SETTINGS, "steps": 0},
                        registry=registry)
    outcome = training.execute(run, training.start(run, registry=registry))
    assert [e.step for e in outcome.history.evals] == [0] and outcome.tokens_per_s == 0.0
    assert outcome.checkpoint is None


def test_a_checkpoint_source_fine_tunes_its_weights_with_its_tokenizer(files, registry):
    plan_and_execute(files, registry, out=files / "ckpt")
    run = training.plan(str(files / "ckpt"), str(files / "play.txt"), SETTINGS, registry=registry)
    assert run.weights.path == files / "ckpt" and run.resume is None
    assert run.data.tokenizer == load_checkpoint(files / "ckpt").tokenizer  # the model's characters, not new ones


def test_the_head_is_refused_before_any_data_is_read(files, registry):
    classifier = files / "classifier.toml"
    classifier.write_text(spec_text(name="c", vocab_size=64, context_length=16, d_model=16, n_layers=1, n_heads=2,
                                    d_ff=32, head="classifier").replace('use = "classifier"',
                                                                        'use = "classifier"\nn_classes = 3'))
    with pytest.raises(NotALanguageModelError, match=r"\$\.head\.use"):
        training.plan(str(classifier), str(files / "no-such-text.txt"), SETTINGS, registry=registry)
    with pytest.raises(DataError, match="no-such-text.txt: cannot read"):  # the same call, an LM head: data next
        training.plan(str(files / "spec.toml"), str(files / "no-such-text.txt"), SETTINGS, registry=registry)


def test_open_data_checks_every_spec_it_serves(files, registry):
    import blockspec

    small = blockspec.loads_spec((files / "spec.toml").read_text().replace("vocab_size = 64", "vocab_size = 8"),
                                 registry)
    big = blockspec.load_spec(files / "spec.toml", registry)
    training.open_data(files / "play.txt", [big], None, tokenizer_of="spec")
    with pytest.raises(DataError, match=r"\$\.model\.vocab_size is 8"):
        training.open_data(files / "play.txt", [big, small], None, tokenizer_of="spec")


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_one_progress_bar_counts_any_unit():
    terminal = FakeTerminal()
    with Progress(total=4096, unit="B", scale=True, description="tokenising", stream=terminal, min_interval=0) as bar:
        bar.advance(2048)
    assert "tokenising" in terminal.getvalue() and "2.05k/4.10k" in terminal.getvalue()
    runs = FakeTerminal()
    with Progress(total=3, unit="run", stream=runs, min_interval=0) as bar:
        bar.advance(status="seed 1")
    assert "1/3" in runs.getvalue() and "seed 1" in runs.getvalue()
