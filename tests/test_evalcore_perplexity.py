"""``blockspec.evaluate_text``: the loss a plain transformers loop computes on the exported copy, bits per
byte from the file's UTF-8 bytes, the BPE ids of a text read in pieces equal to the whole file's."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import blockspec
from blockspec.data.tokenizer import CharTokenizer
from blockspec.evaluate.texts import text_pieces, TextTokens
from blockspec.interop import export_hf, import_hf

from .hf_parity import perturbed

transformers = pytest.importorskip("transformers")
TEXT = "To be, or not to be: that is the question.\nWhether 'tis nobler in the mind to suffer\n" * 6


def plain_loop_loss(model, ids: list[int], context: int, stride: int) -> float:
    """The windows of evaluate.windows' docstring, scored one at a time through a transformers model."""
    nats, count, scored_to, begin = 0.0, 0, 0, 0
    while scored_to < len(ids) - 1:
        window = torch.tensor([ids[begin:begin + context + 1]])  # (1, T + 1)
        with torch.no_grad():
            logits = model(window[:, :-1]).logits  # (1, T, |V|)
        each = F.cross_entropy(logits[0].double(), window[0, 1:], reduction="none")  # (T,)
        nats += each[scored_to - begin:].sum().item()
        count += len(each) - (scored_to - begin)
        scored_to, begin = begin + len(each), begin + stride
    return nats / count


@pytest.fixture(scope="module")
def exported(tmp_path_factory, registry):
    """A GPT-2-shaped tiny model: imported, saved as a checkpoint, exported; the checkpoint and the export."""
    root = tmp_path_factory.mktemp("gpt2")
    config = transformers.GPT2Config(vocab_size=64, n_positions=32, n_embd=16, n_layer=2, n_head=2)
    torch.manual_seed(0)
    hf = perturbed(transformers.GPT2LMHeadModel(config))
    hf.save_pretrained(root / "hf")
    checkpoint = blockspec.save(import_hf(root / "hf", registry=registry), root / "ckpt")
    export_hf(blockspec.load(checkpoint, registry=registry), root / "export")
    back = transformers.GPT2LMHeadModel.from_pretrained(root / "export").eval()
    return checkpoint, back


@pytest.mark.parametrize("context, stride", [(32, 32), (32, 8), (10, 3), (5, 1)])
def test_the_loss_is_a_plain_transformers_loop_on_the_exported_copy(exported, tmp_path, context, stride):
    checkpoint, back = exported
    tokenizer = CharTokenizer.from_text(TEXT)
    (tmp_path / "held-out.txt").write_text(TEXT, encoding="utf-8")
    result = blockspec.evaluate_text(checkpoint, tmp_path / "held-out.txt", context=context, stride=stride,
                                     batch_size=3, tokenizer=tokenizer)
    expected = plain_loop_loss(back, tokenizer.encode(TEXT), context, stride)
    assert result.loss == pytest.approx(expected, abs=1e-5)
    assert result.tokens == len(TEXT) - 1 and (result.context, result.stride) == (context, stride)


@pytest.mark.parametrize("piece_bytes", [4 * 64, 4 * 64 * 7, 1 << 30])  # one row, 7 rows (a partial last), all
def test_the_head_in_pieces_scores_what_the_whole_logits_score(exported, tmp_path, monkeypatch, piece_bytes):
    """The scored positions go through the head a piece at a time: the same loss as a plain loop, any piece size."""
    import blockspec.evaluate.perplexity as perplexity

    monkeypatch.setitem(perplexity.PIECE_BYTES, "cpu", piece_bytes)
    monkeypatch.setitem(perplexity.PIECE_ROWS, "cpu", 1)
    monkeypatch.setattr(perplexity, "head_promises", lambda model: frozenset({"lm"}))  # no logit_columns: pieces
    checkpoint, back = exported
    tokenizer = CharTokenizer.from_text(TEXT)
    (tmp_path / "held-out.txt").write_text(TEXT, encoding="utf-8")
    result = blockspec.evaluate_text(checkpoint, tmp_path / "held-out.txt", context=32, stride=32, batch_size=3,
                                     tokenizer=tokenizer, device="cpu")
    assert result.loss == pytest.approx(plain_loop_loss(back, tokenizer.encode(TEXT), 32, 32), abs=1e-5)


@pytest.mark.parametrize("columns, rows", [(1, 4096), (7, 5), (64, 4096)])  # one token a slice, 7 (a partial
def test_the_head_in_vocabulary_slices_scores_what_the_whole_logits_score(  # last) with 5 positions a time, all
        exported, tmp_path, monkeypatch, columns, rows):
    """A head that promises logit_columns is scored a slice of the vocabulary at a time: the plain loop's loss."""
    import blockspec.evaluate.perplexity as perplexity

    monkeypatch.setitem(perplexity.SLICE_BYTES, "cpu", 1)
    monkeypatch.setattr(perplexity, "SLICE_COLUMNS", columns)
    monkeypatch.setattr(perplexity, "SLICE_ROWS", rows)
    calls = []
    checkpoint, back = exported
    model = blockspec.load(checkpoint)
    assert "logit_columns" in perplexity.head_promises(model)
    original = type(model.head).logit_columns
    monkeypatch.setattr(type(model.head), "logit_columns", lambda *a: calls.append(a[2:]) or original(*a))
    tokenizer = CharTokenizer.from_text(TEXT)
    (tmp_path / "held-out.txt").write_text(TEXT, encoding="utf-8")
    result = blockspec.evaluate_text(model, tmp_path / "held-out.txt", context=32, stride=8, batch_size=3,
                                     tokenizer=tokenizer)
    assert result.loss == pytest.approx(plain_loop_loss(back, tokenizer.encode(TEXT), 32, 8), abs=1e-5)
    assert {end - begin for begin, end in calls} == ({columns} if 64 % columns == 0 else {columns, 64 % columns})


def test_bits_per_byte_of_a_character_model_counts_multibyte_characters(exported, tmp_path):
    checkpoint, _ = exported
    text = "naïve café — ½ € résumé\n" * 20  # characters of 2 and 3 bytes
    tokenizer = CharTokenizer.from_text(text)
    (tmp_path / "utf8.txt").write_text(text, encoding="utf-8")
    result = blockspec.evaluate_text(checkpoint, [tmp_path / "utf8.txt"], context=16, stride=8, tokenizer=tokenizer)
    size = len(text.encode("utf-8"))
    assert size > len(text)
    assert (result.bytes, result.characters, result.tokens) == (size, len(text), len(text) - 1)
    assert result.bits_per_byte == pytest.approx(result.loss / math.log(2) * result.tokens / size, rel=1e-12)
    assert result.bits_per_character == pytest.approx(result.loss / math.log(2) * result.tokens / len(text), rel=1e-12)
    assert result.perplexity == pytest.approx(math.exp(result.loss))


def test_several_files_are_scored_apart_and_summed(exported, tmp_path):
    checkpoint, _ = exported
    tokenizer = CharTokenizer.from_text(TEXT)
    first, second = TEXT[:200], TEXT[200:]
    (tmp_path / "a.txt").write_text(first, encoding="utf-8")
    (tmp_path / "b.txt").write_text(second, encoding="utf-8")
    settings = dict(context=12, stride=5, tokenizer=tokenizer)
    both = blockspec.evaluate_text(checkpoint, [tmp_path / "a.txt", tmp_path / "b.txt"], **settings)
    apart = [blockspec.evaluate_text(checkpoint, tmp_path / name, **settings) for name in ("a.txt", "b.txt")]
    assert both.tokens == len(TEXT) - 2 and both.texts == 2
    assert both.loss * both.tokens == pytest.approx(sum(r.loss * r.tokens for r in apart), rel=1e-9)
    assert both.bytes == sum(r.bytes for r in apart)


def test_the_same_settings_give_the_same_figure(exported, tmp_path):
    checkpoint, _ = exported
    (tmp_path / "t.txt").write_text(TEXT, encoding="utf-8")
    runs = [blockspec.evaluate_text(checkpoint, tmp_path / "t.txt", context=20, stride=7, batch_size=b,
                                    tokenizer=CharTokenizer.from_text(TEXT)) for b in (4, 4, 1)]
    assert runs[0] == runs[1]
    assert runs[0].loss == pytest.approx(runs[2].loss, rel=1e-6)


def test_a_bpe_text_read_in_pieces_has_the_whole_files_ids(tmp_path):
    tokenizers = pytest.importorskip("tokenizers")
    from blockspec.data.tokenizer import HFTokenizer

    text = ("First line  \n\n\n  indented\tline\nword\nx \n y\n\n" + "ünïcode wörds €\n" * 3) * 40
    bpe = tokenizers.Tokenizer(tokenizers.models.BPE())
    bpe.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = tokenizers.decoders.ByteLevel()
    bpe.train_from_iterator([text], tokenizers.trainers.BpeTrainer(
        vocab_size=400, initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet()))
    tokenizer = HFTokenizer(bpe.to_str().encode(), source="test")
    (tmp_path / "t.txt").write_text(text, encoding="utf-8")
    pieces = list(text_pieces(tmp_path / "t.txt", size=64))
    assert len(pieces) > 10 and "".join(pieces) == text
    read = TextTokens(tmp_path / "t.txt", tokenizer, piece_bytes=64)
    assert [i for piece in read for i in piece] == tokenizer.encode(text)
    assert read.size.bytes == len(text.encode("utf-8"))


def test_a_prepared_dataset_is_scored_on_its_validation_split(exported, tmp_path):
    from blockspec.data.prepared import PreparedDataset, prepare

    checkpoint, _ = exported
    tokenizer = CharTokenizer.from_text(TEXT)
    (tmp_path / "corpus.txt").write_text(TEXT, encoding="utf-8")
    prepare([tmp_path / "corpus.txt"], tokenizer, tmp_path / "prepared")
    held_out = tokenizer.decode(PreparedDataset(tmp_path / "prepared").splits["val"].tolist())
    (tmp_path / "val.txt").write_text(held_out, encoding="utf-8")
    settings = dict(context=12, stride=4, tokenizer=tokenizer)
    split = blockspec.evaluate_text(checkpoint, tmp_path / "prepared", **settings)
    text = blockspec.evaluate_text(checkpoint, tmp_path / "val.txt", **settings)
    assert split == text and split.tokens == len(held_out) - 1
