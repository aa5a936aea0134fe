"""``run_tasks``: what ``blockspec eval SOURCE --tasks`` calls. The harness's table offline, its results as JSON,
and bad input in one line (an unknown task with did-you-mean, the harness not installed: the extra to install).
``generate_until`` decodes greedily and stops at a task's stop string. Importing blockspec imports no lm_eval.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest  # noqa: E402

pytest.importorskip("lm_eval")
pytest.importorskip("tokenizers")

import blockspec  # noqa: E402
from blockspec.cli.common import UsageError  # noqa: E402
from blockspec.cli.eval_tasks import add_task_arguments, run_tasks  # noqa: E402
from blockspec.errors import BlockspecError  # noqa: E402

from .harness_tasks import MULTIPLE_CHOICE, tiny  # noqa: E402


def namespace(source, tasks, folder, **given) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_task_arguments(parser)
    argv = ["--tasks", tasks, "--include-path", str(folder), "--limit", "6"]
    args = parser.parse_args(argv)
    return argparse.Namespace(**vars(args), source=str(source), batch_size=2, device="cpu", **{"json": False, **given})


def test_run_tasks_prints_the_harness_table_of_a_local_task(sources, capsys):
    assert run_tasks(namespace(sources / "learned", MULTIPLE_CHOICE, sources / "tasks")) == 0
    out = capsys.readouterr().out
    assert MULTIPLE_CHOICE in out and "acc" in out and out.lstrip().startswith("|")


def test_run_tasks_json_holds_the_harness_results(sources, capsys):
    assert run_tasks(namespace(sources / "learned", MULTIPLE_CHOICE, sources / "tasks", json=True)) == 0
    found = json.loads(capsys.readouterr().out)
    assert 0.0 <= found["results"][MULTIPLE_CHOICE]["acc,none"] <= 1.0
    assert found["n-samples"][MULTIPLE_CHOICE]["effective"] == 6


def test_an_unknown_task_is_one_line_with_the_closest_name(sources):
    with pytest.raises(BlockspecError) as refused:
        run_tasks(namespace(sources / "learned", "blockspec_toy_choise", sources / "tasks"))
    message = str(refused.value)
    assert len(message.splitlines()) == 1
    assert "--tasks" in message and "'blockspec_toy_choise'" in message and f"did you mean '{MULTIPLE_CHOICE}'" in message


def test_the_harness_not_installed_names_the_extra(sources, monkeypatch):
    for name in [n for n in sys.modules if n == "lm_eval" or n.startswith(("lm_eval.", "blockspec.evaluate.harness"))]:
        monkeypatch.delitem(sys.modules, name)
    import blockspec.evaluate

    monkeypatch.delattr(blockspec.evaluate, "harness", raising=False)  # imported again, without the harness
    monkeypatch.setitem(sys.modules, "lm_eval", None)  # import lm_eval -> ModuleNotFoundError
    with pytest.raises(UsageError) as refused:
        run_tasks(namespace(sources / "learned", MULTIPLE_CHOICE, sources / "tasks"))
    assert len(str(refused.value).splitlines()) == 1
    assert "pip install 'blockspec[eval]'" in str(refused.value)


def test_importing_blockspec_imports_no_harness():
    code = ("import sys, blockspec, blockspec.cli, blockspec.evaluate, blockspec.cli.eval_tasks; "
            "print('lm_eval' in sys.modules)")
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert found.stdout.strip() == "False"


def test_the_model_is_registered_as_blockspec():
    from lm_eval.api.registry import get_model

    from blockspec.evaluate.harness import BlockspecLM

    assert get_model("blockspec") is BlockspecLM


GENERATE_UNTIL = """
import json, sys
import torch
from blockspec.evaluate.harness import BlockspecLM
from blockspec.generation.tokens import generate

class Request:
    def __init__(self, *args):
        self.args = args

lm = BlockspecLM(sys.argv[1], batch_size=1)
prompts = ["ROMEO:\\nWhat say", "the lord", "JULIET:\\nO"]
settings = {"until": ["\\n"], "max_gen_toks": 12, "do_sample": False}
found = lm.generate_until([Request(prompt, settings) for prompt in prompts])
wanted = []
for prompt in prompts:
    ids = torch.tensor([lm.tok_encode(prompt)])
    out = generate(lm.model, ids, max_new_tokens=12, temperature=0.0, vocab_limit=lm.tokenizer.vocab_size)
    wanted.append(lm.tok_decode(out[0, ids.shape[1]:].tolist()).split("\\n")[0].split("<|endoftext|>")[0])
print(json.dumps({"found": found, "wanted": wanted}))
"""


def test_generate_until_is_greedy_blockspec_generation_cut_at_the_stop_string(sources):
    """In a fresh interpreter: within the whole suite the two once differed (a session state not yet found;
    the harness part of issue 24's note says so), and this compares the decoding, not the session."""
    done = subprocess.run([sys.executable, "-c", GENERATE_UNTIL, str(sources / "learned")], capture_output=True,
                          text=True, timeout=300, env={**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["found"] == result["wanted"] and len(result["found"]) == 3


def test_a_tokenizerless_source_is_refused_in_one_line(tmp_path, registry):
    from blockspec.evaluate.harness import BlockspecLM

    (tmp_path / "spec.toml").write_text(tiny())
    blockspec.save(blockspec.build(blockspec.load_spec(tmp_path / "spec.toml", registry), registry=registry, seed=0),
                   tmp_path / "bare")
    with pytest.raises(BlockspecError, match="carries no tokenizer") as refused:
        BlockspecLM(tmp_path / "bare")
    assert len(str(refused.value).splitlines()) == 1


# ---------------------------------------------------------------- through the command: blockspec eval --tasks


def test_blockspec_eval_tasks_runs_a_local_task_through_the_command(sources, capsys):
    from blockspec.cli import main

    code = main(["eval", str(sources / "learned"), "--tasks", MULTIPLE_CHOICE, "--include-path",
                 str(sources / "tasks"), "--limit", "6", "--batch-size", "2", "--device", "cpu", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert json.loads(out)["n-samples"][MULTIPLE_CHOICE]["effective"] == 6


@pytest.mark.parametrize(("extra", "said"), [
    (["--data", "x.txt"], "--data and --tasks: give one"),
    ([], None),
])
def test_eval_takes_text_or_tasks_and_each_modes_flags_only_with_it(sources, capsys, extra, said):
    from blockspec.cli import main

    if said is None:  # neither: which to give
        code = main(["eval", str(sources / "learned"), "--limit", "3"])
        said = "expected --data FILE (held-out text) or --tasks T1,T2"
    else:
        code = main(["eval", str(sources / "learned"), "--tasks", MULTIPLE_CHOICE, *extra])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and said in err, err


def test_include_path_without_tasks_is_refused(sources, capsys, tmp_path):
    from blockspec.cli import main

    (tmp_path / "t.txt").write_text("some text\n")
    code = main(["eval", str(sources / "learned"), "--data", str(tmp_path / "t.txt"), "--include-path", str(tmp_path)])
    assert code == 2 and "--include-path: only with --tasks" in capsys.readouterr().err
