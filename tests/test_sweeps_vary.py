"""`--vary` refuses what would train one run twice, as `--seeds 0,0` is refused: one line, exit 2, before any work."""

from __future__ import annotations

import pytest

from blockspec.cli import main


def sweep(inputs, out, *vary: str) -> int:
    spec, data = inputs
    flags = [item for v in vary for item in ("--vary", v)]
    return main(["sweep", str(spec), "--data", str(data), *flags, "--out", str(out), "--steps", "1",
                 "--batch-size", "2", "--eval-batches", "1", "--device", "cpu"])


@pytest.mark.parametrize("vary, said", [
    (["positional.use=learned,learned"], "--vary: positional.use: 'learned' is given twice"),
    (["model.d_model=16,0x10"], "--vary: model.d_model: 16 is given twice (as '16' and '0x10')"),
    (["positional.use=learned,sinusoidal", "norm.use=layernorm,rmsnorm,layernorm"],
     "--vary: norm.use: 'layernorm' is given twice"),
    (["model.dropout=0,0.0"], "--vary: model.dropout=0 and model.dropout=0.0 give the same spec"),
    (["norm.use=layernorm", "norm.use=rmsnorm"], "--vary: norm.use given twice"),
])
def test_a_value_or_key_given_twice_is_refused_in_one_line(inputs, tmp_path, capsys, vary, said):
    assert sweep(inputs, tmp_path / "out", *vary) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert said in line, line
    assert not (tmp_path / "out").exists()


def test_the_library_refuses_a_repeated_value_too(inputs, tmp_path):
    from blockspec.train.sweep import SweepError, run_sweep

    spec, data = inputs
    with pytest.raises(SweepError, match="positional.use: 'rope' is given twice"):
        run_sweep(spec, data, {"positional.use": ["rope", "rope"]}, tmp_path / "out")
    assert not (tmp_path / "out").exists()
