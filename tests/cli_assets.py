"""Small real inputs for command-line tests, made once per module: a micro spec and text, a checkpoint
trained one step, a GPT-2-shaped character checkpoint and its Hugging Face export."""

from __future__ import annotations

from pathlib import Path

from attrs import frozen

from blockspec.cli import main

from .corpus import small_play
from .specs import spec_text

SPECS = Path(__file__).resolve().parents[1] / "examples" / "specs"
TINY = SPECS / "tiny-shakespeare.toml"  # 65 characters, learned positions: exports as GPT-2
MICRO = spec_text(name="micro", vocab_size=64, context_length=32, d_model=32, n_layers=2, n_heads=4, d_ff=64,
                  positional="rope")
FAST = ["--batch-size", "8", "--eval-batches", "2", "--eval-every", "0", "--device", "cpu", "--quiet"]


@frozen
class Assets:
    folder: Path
    spec: Path  # micro.toml
    data: Path  # play.txt
    ckpt: Path  # micro, trained one step
    char_ckpt: Path  # tiny-shakespeare, trained one step
    hf: Path  # char_ckpt exported to the Hugging Face layout


def make_assets(folder: Path) -> Assets:
    spec, data = folder / "micro.toml", folder / "play.txt"
    spec.write_text(MICRO)
    data.write_text(small_play(200))
    assets = Assets(folder, spec, data, folder / "ckpt", folder / "char-ckpt", folder / "hf")
    for source, out in ((spec, assets.ckpt), (TINY, assets.char_ckpt)):
        assert main(["train", str(source), "--data", str(data), "--steps", "1", "--out", str(out), *FAST]) == 0
    assert main(["export-hf", str(assets.char_ckpt), "--out", str(assets.hf)]) == 0
    return assets
