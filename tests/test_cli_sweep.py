"""Sweep every command's arguments: valid values mixed with hostile ones, and the contract holds.

The parser is introspected (``make_parser()``), so a new command or flag is swept without a
change here. For each drawn command line, ``main(argv)`` runs in-process and must:

- exit 0 or 2 (1 is "internal error": never from user input);
- on 2, write ``blockspec: error: ...`` lines and nothing else besides ``blockspec: warning:``
  lines: one line, or one per located problem where a report lists several (a spec's problems,
  ``check``'s files, why a model exports as no family); argparse's refusals exactly one; never a
  traceback.

The heavy work is kept small, not skipped: training runs at most one step and one evaluation
batch, generation at most a few tokens (after the library has checked the real request), and
``verify`` stops after choosing what to check. Example specs too big to build on a laptop
(gpt2-*, llama2-7b) are offered only to the commands that never build them (check, show).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import attrs
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from blockspec.cli import main, make_parser

from .cli_assets import SPECS, TINY, make_assets

HUGE = "99999999999999999999999"
NUMBERS = ["0", "1", "2", "-1", "-3", "0.5", "1e-3", "1e309", "nan", "inf", "-inf", HUGE, "-" + HUGE, "3.0", " 7 ",
           "0x10", "1_000"]
TEXTS = ["", " ", "To be", "ü✓", "\n", "a\tb", "zz" * 40, "日本語", "\x00", "--", "-x"]
DEVICES = ["auto", "cpu", "CPU", "cuda", "cuda:0", "cuda:7", "mps", "tpu", "cpu:1", "", "cuda:-1"]
SMALL_SPECS = [str(TINY), str(SPECS / "tiny-shakespeare-sinusoidal.toml")]
BIG_SPECS = [str(p) for p in sorted(SPECS.glob("*.toml")) if str(p) not in SMALL_SPECS]
NEVER_BUILD = {"check", "show"}


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    return make_assets(tmp_path_factory.mktemp("sweep-assets"))


@pytest.fixture(scope="module")
def cheap(assets):
    """The heavy work, capped: a step, a batch, a few tokens; verify's selection, not its examples; --compile
    traced, not compiled to C++ (a cold inductor cache took most of a minute per swept sweep)."""
    import blockspec.testing.runner as runner
    import blockspec.generation.text as text
    import blockspec.generation.tokens as generation
    import blockspec.train.run as run

    real_config, real_stream = run.make_config, generation.generate_stream

    def make_config(settings_, **where):
        config = real_config(settings_, **where)  # the real checks first
        return attrs.evolve(config, steps=min(config.steps, 1), eval_batches=1, batch_size=min(config.batch_size, 4))

    def generate_stream(model, ids, settings, **context):
        generation.check_request(model, ids, settings, vocab_limit=context.get("vocab_limit"))  # the real checks
        return real_stream(model, ids, attrs.evolve(settings, max_new_tokens=min(settings.max_new_tokens, 3)), **context)

    real_compile = torch.compile

    def compile_traced_only(model, **options):  # dynamo traces as --compile does; no C++ code is generated
        return real_compile(model, **{**options, "backend": "aot_eager"})

    threads = torch.get_num_threads()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(torch, "compile", compile_traced_only)
        patch.setattr(run, "make_config", make_config)  # where train and sweep read their settings
        patch.setattr(generation, "generate_stream", generate_stream)
        patch.setattr(text, "generate_stream", generate_stream)  # each name the library calls it by
        patch.setattr(runner, "verify", lambda components, **kwargs: [])
        yield
    torch.set_num_threads(threads)


def subcommands() -> dict[str, argparse.ArgumentParser]:
    """Command line prefix ("train", "tokenizer train") -> its parser, commands with actions flattened."""
    return dict(_flattened(make_parser(), ""))


def _flattened(parser: argparse.ArgumentParser, prefix: str):
    action = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
    if action is None:
        yield prefix, parser
        return
    for name, sub in action.choices.items():
        yield from _flattened(sub, f"{prefix} {name}".strip())


def _scratch_paths(scratch: Path) -> dict[str, list[str]]:
    """Hostile paths, made fresh for each example inside its own folder."""
    folder, garbage, text = scratch / "a-folder", scratch / "garbage.bin", scratch / "text.txt"
    folder.mkdir()
    garbage.write_bytes(bytes(range(256)) * 3)
    text.write_text("just some text, not toml = [\n")
    (scratch / "garbage.safetensors").write_bytes(b"\xff" * 16)
    (scratch / "bad.toml").write_text("[model]\nname = 3\n")
    return {"hostile": [str(folder), str(garbage), str(text), str(scratch / "missing"), str(scratch / "bad.toml"),
                        str(scratch / "garbage.safetensors"), str(scratch / "missing" / "deeper.toml")],
            "out": [str(scratch / "out"), str(scratch / "out.html"), str(scratch / "new" / "x.png"), str(folder),
                    str(garbage), str(scratch / "p.svg"), str(scratch / "plot"), str(scratch / "q.jpgg")]}


def _valid(dest: str, command: str, assets, out: list[str]) -> list[str]:
    """Values that may well be right for a flag or positional, by its destination name."""
    models = [*SMALL_SPECS, str(assets.spec), str(assets.ckpt), str(assets.char_ckpt), str(assets.hf)]
    if command in NEVER_BUILD:
        models += BIG_SPECS
    return {
        "spec": models, "specs": models, "checkpoint": [str(assets.ckpt), str(assets.char_ckpt), str(assets.hf)],
        "resume": [str(assets.ckpt), str(assets.char_ckpt)], "directory": [str(assets.hf), str(assets.ckpt)],
        "weights": [str(assets.ckpt), str(assets.char_ckpt), str(assets.hf / "model.safetensors")],
        "data": [str(assets.data)], "files": [str(assets.data)], "tokenizer": ["char", str(assets.char_ckpt)],
        "out": out, "plot": out, "device": ["auto", "cpu", " CPU "],
        "prompt": ["to", "To be", "the lord"], "text": ["to", "To be", "the lord"],
        "ids": ["1,2", "0", "1, 2 ,3", "64", "65", "-1", ",", "1,,2", "a,b", HUGE],
        "stage": ["*", "blocks.*.attn.weights", "nothing", "[", ""], "component": ["norm:rmsnorm", "norm:", "x:y",
                                                                                  "activation:gelu", "norm:rmsnrm"],
        "distribution": ["blockspec-norms", "nope", ""],
        "vary": ["positional.use=learned,rope", "norm.use=rmsnorm", "model.d_model=32", "model.d_model=abc",
                 "nothing.use=x", "positional", "positional.use=", "attention.sliding_window=4"],
        "seeds": ["0", "0,1", "1,1", "a", "", "-1," + HUGE], "registry": [str(SPECS.parent.parent / "registry.toml")],
    }.get(dest, NUMBERS + TEXTS)


def _option_value(action: argparse.Action, command: str, assets, paths) -> st.SearchStrategy[str]:
    """Mostly a plausible value (so that a command line gets past its first flag), one time in four a hostile one."""
    if action.choices is not None:
        valid, hostile = list(map(str, action.choices)), ["zzz", "", "ALL"]
    elif action.type is not None and action.type is not str:
        valid, hostile = ["1", "2", "3", "0.5"], NUMBERS
    else:
        valid, hostile = _valid(action.dest, command, assets, paths["out"]), paths["hostile"] + NUMBERS + TEXTS
        hostile += DEVICES if action.dest == "device" else []
    return st.sampled_from([valid] * 3 + [hostile]).flatmap(st.sampled_from)


@st.composite
def command_lines(draw, command: str, assets, paths) -> list[str]:
    parser = subcommands()[command]
    argv, taken = command.split(), set()
    exclusive = {id(a): group for group in parser._mutually_exclusive_groups for a in group._group_actions}
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._VersionAction)):
            continue
        group = exclusive.get(id(action))
        if group is not None and id(group) in taken and draw(st.sampled_from([True] * 7 + [False])):
            continue  # mostly one of a mutually exclusive group (trace: --text or --ids), sometimes both
        if not action.option_strings:  # a positional
            count = draw(st.integers(1, 2)) if action.nargs == "+" else 1
            argv += [draw(_option_value(action, command, assets, paths)) for _ in range(count)]
            continue
        if not draw(st.sampled_from([True] * 7 + [False]) if action.required else st.sampled_from([True, False, False])):
            continue
        flag = draw(st.sampled_from(action.option_strings))
        if group is not None:
            taken.add(id(group))
        if action.nargs == 0:
            argv.append(flag)
        else:
            value = draw(_option_value(action, command, assets, paths))
            argv += [f"{flag}={value}"] if draw(st.booleans()) else [flag, value]
    return argv


def check_contract(argv: list[str], code: int, err: str) -> None:
    where = f"blockspec {' '.join(map(repr, argv))}\n{err}"
    assert code in (0, 2), where  # 1: internal error
    assert "Traceback" not in err and "internal error" not in err, where
    lines = [line for line in err.splitlines() if not line.startswith("blockspec: warning: ")]
    errors = [line for line in lines if line.startswith("blockspec: error: ")]
    assert errors == lines, where  # nothing else on stderr
    if code == 2:
        assert errors, where
        if errors[-1].endswith("--help)"):  # argparse's refusal: one line
            assert len(errors) == 1, where


DEFAULT_COMMAND_LINES = 20


@pytest.mark.parametrize("command", sorted(subcommands()))
def test_every_command_line_is_answered_within_the_contract(command, assets, cheap, capsys):
    # 20 command lines per command in every profile (about half of this file's default-profile time went
    # to the ci profile's 40); test_many_more_command_lines draws 300 each in the slow profile
    _sweep(command, assets, capsys, max_examples=min(settings.default.max_examples, DEFAULT_COMMAND_LINES))


@pytest.mark.slow
@pytest.mark.parametrize("command", sorted(subcommands()))
def test_many_more_command_lines(command, assets, cheap, capsys):
    _sweep(command, assets, capsys, max_examples=300)


def _sweep(command: str, assets, capsys, **limits) -> None:
    @settings(suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large], deadline=None, **limits)
    @given(data=st.data())
    def sweep(data):
        with tempfile.TemporaryDirectory() as scratch, pytest.MonkeyPatch.context() as patch:
            patch.chdir(scratch)  # a relative value ("to", "-1") given as --out lands here, not in the checkout
            paths = _scratch_paths(Path(scratch))
            argv = data.draw(command_lines(command, assets, paths), label="argv")
            code = main(argv)
            out, err = capsys.readouterr()
            check_contract(argv, code, err)

    sweep()


def test_the_sweep_reaches_every_flag_of_every_command():
    """A flag the drawing cannot reach would never be swept (e.g. one added with an unusual action)."""
    for command, parser in subcommands().items():
        for action in parser._actions:
            # BooleanOptionalAction (train's --compile/--no-compile): nargs 0, drawn as either of its flags;
            # _AppendAction (sweep's --vary): one value, drawn as a store is
            assert isinstance(action, (argparse._StoreAction, argparse._StoreTrueAction, argparse._HelpAction,
                                       argparse.BooleanOptionalAction, argparse._AppendAction)), \
                (command, action)



def test_a_dash_dash_value_of_an_action_flag_is_one_line(capsys):
    """``data prepare --tokenizer=--``: argparse makes the value a list; the flag of a command's action
    (two parsers down) is named, as a command's own flags are, never an internal error."""
    assert main(["data", "prepare", "x.txt", "--tokenizer=--", "--out", "o"]) == 2
    err = capsys.readouterr().err
    assert err == ("blockspec: error: --tokenizer: expected one value, found '--' "
                   "(see blockspec data prepare --help)\n"), err
