"""Fine-tuning an imported Hugging Face model: its tokenizer comes with it, and export-hf gives the
original's token ids, config and tokenizer back with the new weights, which transformers loads."""

from __future__ import annotations

import pytest

transformers = pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

import torch  # noqa: E402

import blockspec  # noqa: E402
from blockspec.cli import main  # noqa: E402
from .hf_parity import perturbed  # noqa: E402

WORDS = "the a cat dog sat ran on under mat log big small red blue and then".split()
TEXT = " ".join(WORDS[(i * 7 + i // 5) % len(WORDS)] for i in range(3000))


def word_tokenizer(unknown: str = "[UNK]") -> bytes:
    """A word-level tokenizer.json whose ids fit the tiny model's vocabulary."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    tokenizer = Tokenizer(models.WordLevel({unknown: 0, **{w: i + 1 for i, w in enumerate(WORDS)}},
                                           unk_token=unknown))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    return tokenizer.to_str().encode()


def tiny_gpt2():
    """hf_parity.tiny's random model, for GPT-2 (whose class is GPT2LMHeadModel, not GPT2ForCausalLM)."""
    config = transformers.GPT2Config(n_embd=32, n_layer=2, n_head=4, n_positions=64, vocab_size=24)
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    return perturbed(transformers.GPT2LMHeadModel(config), 0)


def cli(capsys, *argv) -> str:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    """(root, HF directory, checkpoint imported from it, prepared data with its tokenizer)."""
    root = tmp_path_factory.mktemp("finetune")
    tiny_gpt2().save_pretrained(root / "hf")
    (root / "hf" / "tokenizer.json").write_bytes(word_tokenizer())
    (root / "text.txt").write_text(TEXT, encoding="utf-8")
    assert main(["import-hf", str(root / "hf"), "--out", str(root / "ckpt")]) == 0
    assert main(["data", "prepare", str(root / "text.txt"), "--tokenizer", str(root / "ckpt"),
                 "--out", str(root / "data")]) == 0
    return root


def test_finetune_then_export_loads_in_transformers(imported, capsys):
    root = imported
    cli(capsys, "train", root / "ckpt", "--data", root / "data", "--steps", 50, "--batch-size", 4,
        "--eval-every", 0, "--eval-batches", 1, "--lr", "1e-2", "--out", root / "ft", "--quiet")
    cli(capsys, "export-hf", root / "ft", "--out", root / "hf2")
    assert (root / "hf2" / "tokenizer.json").read_bytes() == word_tokenizer()
    hf2 = transformers.GPT2LMHeadModel.from_pretrained(root / "hf2").eval()
    original = transformers.GPT2LMHeadModel.from_pretrained(root / "hf").eval()
    ours = blockspec.load(root / "ft").eval()
    ids = torch.randint(0, 24, (2, 40), generator=torch.Generator().manual_seed(1))  # (B, T)
    with torch.no_grad():
        expected, got, before = ours(ids), hf2(ids).logits, original(ids).logits
    scale = max(1.0, expected.abs().max().item())
    assert (got - expected).abs().max().item() <= 1e-4 * scale
    assert (got - before).abs().max().item() > 1e-3  # fine-tuning moved the weights
    weight = "transformer.h.0.attn.c_attn.weight"
    assert not torch.equal(hf2.state_dict()[weight], original.state_dict()[weight])


def test_finetune_text_file_uses_the_models_tokenizer(imported, capsys):
    root = imported
    cli(capsys, "train", root / "ckpt", "--data", root / "text.txt", "--steps", 2, "--batch-size", 2,
        "--eval-every", 0, "--eval-batches", 1, "--out", root / "ft-text", "--quiet")
    from blockspec.train.checkpointing import load_checkpoint

    checkpoint = load_checkpoint(root / "ft-text")
    assert checkpoint.tokenizer.data == word_tokenizer()  # the words, not the text's characters
    assert set(checkpoint.carried) >= {"hf/config.json", "hf/tokenizer.json"}


def test_finetune_from_the_hf_directory_keeps_its_files(imported, capsys):
    root = imported
    cli(capsys, "train", root / "hf", "--data", root / "data", "--steps", 1, "--batch-size", 2,
        "--eval-every", 0, "--eval-batches", 1, "--out", root / "ft-hf", "--quiet")
    cli(capsys, "export-hf", root / "ft-hf", "--out", root / "hf3")
    assert (root / "hf3" / "tokenizer.json").read_bytes() == word_tokenizer()


def test_data_of_another_tokenizer_is_refused_before_training(imported, capsys):
    root = imported
    other = root / "other-tok"
    other.mkdir()
    (other / "tokenizer.json").write_bytes(word_tokenizer("<unk>"))
    assert main(["data", "prepare", str(root / "text.txt"), "--tokenizer", str(other),
                 "--out", str(root / "other-data")]) == 0
    capsys.readouterr()
    code = main(["train", str(root / "ckpt"), "--data", str(root / "other-data"), "--steps", "1",
                 "--out", str(root / "never")])
    err = capsys.readouterr().err
    assert code != 0 and "Traceback" not in err
    assert "another tokenizer" in err and f"--tokenizer {root / 'ckpt'}" in err
    assert len(err.strip().splitlines()) == 1
    assert not (root / "never").exists()
