"""Instruction data: `data prepare --format prompt-response` writes a loss mask, and training scores the
responses alone (issue 26, item 5): a prompt's target changes nothing, an old dataset trains as before."""

from __future__ import annotations

import json
import random
import shutil

import attrs

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings, strategies as st

import blockspec
from blockspec.cli import main
from blockspec.data import instruct
from blockspec.data.dataset import IGNORED_TARGET, DataError, batch_seed
from blockspec.data.prepared import PreparedDataset, prepare, scored_targets
from blockspec.data.prepared_instruct import prepare_examples
from blockspec.data.tokenizer import train_bpe
from blockspec.train.checkpointing import load_checkpoint
from blockspec.train.loop import Trainer, TrainConfig

from .corpus import small_play
from .specs import spec_text

pytest.importorskip("tokenizers")
pytestmark = pytest.mark.usefixtures("one_thread")  # micro models: see conftest

VOCAB = 300
CONTEXT = 16
WORDS = "the a cat dog sat ran on under mat log big small red blue".split()
FAST = ["--batch-size", "4", "--eval-batches", "2", "--eval-every", "2", "--lr", "1e-2", "--quiet"]
texts = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)


def rows(count: int, seed: int = 0) -> list[dict[str, str]]:
    """Questions of a few words, each answered by its words reversed."""
    draw = random.Random(seed)
    questions = [" ".join(draw.choice(WORDS) for _ in range(draw.randint(2, 8))) for _ in range(count)]
    return [{"prompt": f"Q: {q}\n", "response": "A: " + " ".join(reversed(q.split()))} for q in questions]


def write_jsonl(path, lines: list) -> None:
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines),
                    encoding="utf-8")


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    """A BPE learnt from the examples, the examples prepared with it, and a micro spec."""
    folder = tmp_path_factory.mktemp("instruct")
    write_jsonl(folder / "qa.jsonl", rows(160))
    (folder / "spec.toml").write_text(spec_text(name="qa-micro", vocab_size=VOCAB, context_length=CONTEXT,
                                                d_model=16, n_layers=1, n_heads=2, d_ff=32))
    assert main(["tokenizer", "train", str(folder / "qa.jsonl"), "--vocab-size", str(VOCAB), "--out",
                 str(folder / "tok")]) == 0
    assert main(["data", "prepare", str(folder / "qa.jsonl"), "--format", "prompt-response", "--tokenizer",
                 str(folder / "tok"), "--out", str(folder / "data"), "--quiet"]) == 0
    return folder


@pytest.fixture(scope="module")
def bpe():
    return train_bpe(iter([small_play(40)]), VOCAB)


def examples_of(data: PreparedDataset) -> list[tuple[list[int], list[int]]]:
    """(ids, mask) of each example, cut after each end-of-text token, across both splits."""
    ids = np.concatenate([data.splits["train"], data.splits["val"]]).tolist()
    mask = np.concatenate([data.masks["train"], data.masks["val"]]).tolist()
    end = data.tokenizer.encode(data.meta.separator)
    cuts = [i + 1 for i, token in enumerate(ids) if [token] == end]
    return [(ids[a:b], mask[a:b]) for a, b in zip([0, *cuts], cuts)]


@settings(max_examples=15, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pairs=st.lists(st.tuples(texts, texts), min_size=2, max_size=6),
       template=st.sampled_from(["{prompt}{response}", "### Q:\n{prompt}\n### A:\n{response}\n",
                                 "<{prompt}|{response}>"]))
def test_the_mask_covers_exactly_each_responses_tokens_and_its_end(tmp_path_factory, bpe, pairs, template):
    folder = tmp_path_factory.mktemp("mask")
    write_jsonl(folder / "x.jsonl", [{"prompt": p, "response": r} for p, r in pairs])
    meta = prepare_examples([folder / "x.jsonl"], bpe, folder / "out", template=instruct.parse_template(template))
    data = PreparedDataset(folder / "out")
    end = bpe.encode("<|endoftext|>")
    found = examples_of(data)
    assert len(found) == len(pairs) == sum(meta["loss_mask"]["examples"].values())
    for (prompt, response), (ids, mask) in zip(pairs, found):
        before, after = template.split("{prompt}")[0], template.split("{response}")[1]
        between = template.split("{prompt}")[1].split("{response}")[0]
        unscored, scored = bpe.encode(before + prompt + between), bpe.encode(response + after) + end
        assert ids == unscored + scored and mask == [0] * len(unscored) + [1] * len(scored)
    assert data.masks["train"][-1] == 1 and data.splits["train"][-1] == end[0]  # the split falls between examples
    assert meta["loss_mask"]["scored_tokens"] == {s: int(data.masks[s].sum()) for s in ("train", "val")}


def test_a_template_is_cut_never_formatted():
    template = instruct.parse_template("[{prompt}] => {response}.")
    assert template.sides("{response} {0} {x!r}", "%s {prompt}") == ("[{response} {0} {x!r}] => ", "%s {prompt}.")


LORA = '\n[[adapters]]\nuse = "lora"\ntargets = ["@attention", "@ffn"]\nrank = 2\n'


def micro_trainer(registry, data, adapters: bool = False, **settings) -> Trainer:
    """The micro spec's trainer; with ``adapters``, LoRA on every projection over its frozen base."""
    config = TrainConfig(**{"steps": 3, "batch_size": 8, "eval_every": 0, "eval_batches": 2, "lr": 1e-2,
                            **settings})
    text = spec_text(name="qa-micro", vocab_size=VOCAB, context_length=CONTEXT, d_model=16, n_layers=1, n_heads=2,
                     d_ff=32)
    spec = blockspec.loads_spec(text + (LORA if adapters else ""), registry)
    return Trainer(blockspec.build(spec, registry=registry, seed=0), data, config)


def loss_and_gradients(trainer: Trainer, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    loss = trainer.loss(x, y)
    trainable = [p for p in trainer.raw.parameters() if p.requires_grad]  # the adapters alone over a frozen base
    return loss.detach(), list(torch.autograd.grad(loss, trainable))


@pytest.fixture(scope="module", params=["full", "adapters"])
def masked_trainer(registry, root, request):
    """Full fine-tuning and adapter fine-tuning score the same targets: the mask is the data's, not the model's."""
    return micro_trainer(registry, PreparedDataset(root / "data"), adapters=request.param == "adapters")


@settings(max_examples=10, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32), pick=st.integers(0, 10**6), token=st.integers(0, VOCAB - 1))
def test_a_prompt_tokens_target_changes_nothing_a_responses_does(masked_trainer, seed, pick, token):
    data = masked_trainer.data
    windows, mask = data.windows("train", size=4, length=CONTEXT, seed=seed)  # (B, T + 1) each
    x, targets, scored = windows[:, :-1], windows[:, 1:], mask[:, 1:]
    assert all(torch.equal(a, b) for a, b in zip(data.batch("train", size=4, length=CONTEXT, seed=seed),
                                                 (x, scored_targets(targets, scored))))  # what training draws
    loss, grads = loss_and_gradients(masked_trainer, x, scored_targets(targets, scored))
    for kind, same in ((0, True), (1, False)):
        positions = np.argwhere(scored == kind)
        row, column = positions[pick % len(positions)]
        changed = targets.clone()
        changed[row, column] = (int(targets[row, column]) + 1 + token % (VOCAB - 1)) % VOCAB  # another token
        other_loss, other_grads = loss_and_gradients(masked_trainer, x, scored_targets(changed, scored))
        assert torch.equal(loss, other_loss) is same
        assert all(torch.equal(a, b) for a, b in zip(grads, other_grads)) is same


def test_a_steps_loss_is_the_mean_over_every_scored_target_however_the_pieces_hold_them(registry, root):
    whole, pieces = (micro_trainer(registry, PreparedDataset(root / "data"), grad_accum=k) for k in (1, 4))
    x, y = whole.batch("train", "train", 0)
    with torch.no_grad():
        logits = whole.model(x).float()  # (B, T, |V|)
    expected = F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="sum") / (y != IGNORED_TARGET).sum()
    assert len({int((p != IGNORED_TARGET).sum()) for _, p in pieces.micro_batches("train", "train", 0)}) > 1
    assert pieces.train_step() == pytest.approx(expected.item(), rel=1e-5) == whole.train_step()


def test_a_dataset_without_a_mask_loads_and_trains_as_before(registry, root, bpe, tmp_path):
    (tmp_path / "play.txt").write_text(small_play(40))
    prepare([tmp_path / "play.txt"], bpe, tmp_path / "old")
    old = PreparedDataset(tmp_path / "old")
    assert "loss_mask" not in json.loads((tmp_path / "old" / "meta.json").read_text()) and not old.masked
    trainer = micro_trainer(registry, old, grad_accum=2)
    pieces = trainer.micro_batches("train", "train", 0)
    trainer.model.train()
    with torch.no_grad():  # the loss before masks: each piece's mean cross-entropy, over the pieces
        before = sum(F.cross_entropy(trainer.model(x).float().flatten(0, 1), y.flatten()) / 2 for x, y in pieces)
    assert all((y != IGNORED_TARGET).all() for _, y in pieces)
    assert trainer.train_step() == before.item()


def test_instruction_data_trains_and_fine_tunes_from_the_cli_and_eval_refuses_it(root, capsys):
    out = root / "run"
    assert main(["train", str(root / "spec.toml"), "--data", str(root / "data"), "--steps", "4",
                 "--grad-accum", "2", "--out", str(out), *FAST]) == 0
    assert main(["train", str(out), "--data", str(root / "data"), "--steps", "6", "--out", str(root / "tuned"),
                 *FAST]) == 0
    history = load_checkpoint(root / "tuned").training["history"]
    assert len(history["train"]) == 6 and np.isfinite(history["train"]).all()
    assert all(np.isfinite(e["val_loss"]) and e["val_bpb"] > 0 for e in history["evals"])
    capsys.readouterr()
    assert main(["eval", str(root / "tuned"), "--data", str(root / "data")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "loss mask" in err and "Traceback" not in err


def test_a_mask_file_of_the_wrong_size_or_content_is_refused(root, tmp_path):
    shutil.copytree(root / "data", tmp_path / "data")
    mask = tmp_path / "data" / "val.mask"
    right = mask.read_bytes()
    mask.write_bytes(right + b"\x01")
    with pytest.raises(DataError, match=r"val\.mask: expected \d+ uint8 mask bytes"):
        PreparedDataset(tmp_path / "data")
    mask.write_bytes(bytes([1 - right[0]]) + right[1:])  # one target scored that was not, or the reverse
    with pytest.raises(DataError, match=r"val\.mask: expected \d+ scored tokens"):
        PreparedDataset(tmp_path / "data")


@pytest.mark.parametrize("lines, flags, words", [
    (['{"prompt": "a", "response": "b"}', "not json"], [], ["x.jsonl:2:", "expected a JSON object", "'not json'"]),
    (['{"prompt": "a", "response": "b"}', '{"prompt": "a", "answer": "b"}'], [],
     ["x.jsonl:2:", "no key 'response'", "its keys: 'prompt', 'answer'", "--response-key"]),
    (['{"q": "a", "response": "b"}'] * 2, ["--prompt-key", "question"], ["x.jsonl:1:", "no key 'question'"]),
    (['{"prompt": "a", "response": ["b"]}'] * 2, [], ["x.jsonl:1:", "a string at 'response'", "found an array"]),
    ([], [], ["x.jsonl:", "is empty", "JSON lines"]),
    (['{"prompt": "a", "response": "b"}', ""], [], ["x.jsonl:", "holds 1 example", "validation"]),
    (['{"prompt": "a", "response": "b"}'] * 2, ["--template", "Q: {prompt}"], ["--template:", "{response} 0 times"]),
    (['{"prompt": "a", "response": "b"}'] * 2, ["--template", "{response}{prompt}"], ["{response} first"]),
])
def test_bad_instruction_data_is_one_line_exit_2_before_any_work(root, tmp_path, capsys, lines, flags, words):
    write_jsonl(tmp_path / "x.jsonl", lines) if lines else (tmp_path / "x.jsonl").write_bytes(b"")
    code = main(["data", "prepare", str(tmp_path / "x.jsonl"), "--format", "prompt-response", *flags,
                 "--tokenizer", str(root / "tok"), "--out", str(tmp_path / "out"), "--quiet"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert all(word in err for word in words), err
    assert not (tmp_path / "out").exists()


def test_an_example_flag_without_the_format_is_refused(root, tmp_path, capsys):
    assert main(["data", "prepare", str(root / "qa.jsonl"), "--prompt-key", "q", "--tokenizer", str(root / "tok"),
                 "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--prompt-key" in err and "--format prompt-response" in err


def test_a_tokenizer_with_nothing_to_end_an_example_is_refused_before_any_work(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers

    from blockspec.data.tokenizer import TokenizerError, tokenizer_from_bytes

    words = Tokenizer(models.WordLevel({"[UNK]": 0, "a": 1, "b": 2}, unk_token="[UNK]"))
    words.pre_tokenizer = pre_tokenizers.Whitespace()  # a line break encodes as no token
    write_jsonl(tmp_path / "x.jsonl", [{"prompt": "a", "response": "b"}] * 2)
    with pytest.raises(TokenizerError, match="has no end-of-text token and encodes a line break as no token"):
        prepare_examples([tmp_path / "x.jsonl"], tokenizer_from_bytes(words.to_str().encode(), source="words"),
                         tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.slow  # two processes start (about 5 s); the one-process weighting test above keeps the arithmetic
def test_two_processes_weigh_their_scored_targets_as_one_process_does(registry, root, tmp_path):
    from .test_distributed import torchrun

    flags = ["--steps", "1", "--batch-size", "8", "--eval-every", "0", "--eval-batches", "2", "--grad-accum", "2"]
    summary = torchrun(str(root / "spec.toml"), "--data", str(root / "data"), *flags, "--out", "ckpt", cwd=tmp_path)
    reference = micro_trainer(registry, PreparedDataset(root / "data"), steps=1, lr=TrainConfig().lr)  # the CLI's
    reference.run()
    saved = load_checkpoint(tmp_path / "ckpt").training["history"]
    assert summary["world_size"] == 2
    assert saved["train"][0] == pytest.approx(reference.history.train[0], rel=1e-6)
    assert summary["val_loss"] == pytest.approx(reference.history.evals[-1].val_loss, rel=1e-6)


def test_evaluation_batches_that_score_nothing_are_refused_not_reported_as_zero(registry, bpe, tmp_path):
    long_prompt = " ".join(WORDS * 12)  # hundreds of prompt tokens to each scored one (an empty response's end)
    write_jsonl(tmp_path / "x.jsonl", [{"prompt": long_prompt, "response": ""}] * 12)
    prepare_examples([tmp_path / "x.jsonl"], bpe, tmp_path / "out")
    trainer = micro_trainer(registry, PreparedDataset(tmp_path / "out"), batch_size=1, eval_batches=1)
    seed = next(s for s in range(1000) if not trainer.data.windows(
        "train", size=1, length=CONTEXT, seed=batch_seed(s, "eval-train", 0))[1][:, 1:].any())
    trainer.config = attrs.evolve(trainer.config, seed=seed)
    with pytest.raises(DataError, match="evaluation batches of the train split hold no scored target"):
        trainer.evaluate()
