"""Issue 28, finding 3: ``generate --temperature 1e-40`` ended in "internal error".

The cause: the sampler divided the logits by the temperature, and a tiny one sent them to +-inf
(1e-40 is a subnormal float32; below 1.4e-45 it is 0), so the softmax was NaN and
``torch.multinomial`` raised. It now divides each logit's distance from the largest one, which is
never positive, and keeps the largest at 0: a tiny positive temperature is the limit of the
distribution, all its mass on the likeliest token, i.e. greedy decoding. And every argument of
``generate()`` has a stated bound, refused before any work as an ``InputError`` naming it.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import blockspec
from blockspec.errors import InputError
from blockspec.generation.tokens import generate, sample

from .cli_assets import make_assets
from .specs import spec_text
from .cli_run import run

TINY_TEMPERATURES = (1e-40, 1e-45, 1e-300, 5e-324, 1e-8)
UNDERFLOW = 110.0  # exp(-x) is 0 in float32 past about 104: a gap this many temperatures wide leaves one token


@pytest.fixture(scope="module")
def model(registry):
    text = spec_text(name="bounds", vocab_size=29, context_length=16, d_model=32, n_layers=1, n_heads=4, d_ff=48,
                     positional="rope")
    built = blockspec.build(blockspec.loads_spec(text, registry), registry=registry, seed=0)
    with torch.no_grad():
        built.embedding.weight.mul_(25.0)  # logits far apart: greedy has no near-ties
    return built.eval()


@pytest.mark.parametrize("temperature", TINY_TEMPERATURES)
def test_a_tiny_temperature_samples_the_likeliest_token(temperature):
    logits = torch.tensor([[1.0, 7.5, -3.0, 7.25], [-50.0, -40.0, -60.0, -45.0]])
    assert sample(logits, temperature=temperature).flatten().tolist() == [1, 1]


@given(st.lists(st.floats(-1e4, 1e4, allow_nan=False, width=32), min_size=2, max_size=40, unique=True),
       st.sampled_from(TINY_TEMPERATURES), st.sampled_from([torch.float32, torch.bfloat16, torch.float16]),
       st.one_of(st.none(), st.integers(1, 5)))
def test_sampling_never_fails_and_a_tiny_temperature_is_greedy(values, temperature, dtype, top_k):
    logits = torch.tensor([values]).to(dtype)
    token = sample(logits, temperature=temperature, top_k=top_k)
    assert 0 <= token.item() < len(values)  # never fails, never NaN
    top, second = logits.double().topk(2).values[0].tolist()
    if (top - second) / temperature > UNDERFLOW:  # the runner-up's probability is 0 in float32: greedy is the limit
        assert token.item() == logits.argmax().item()


def test_a_tied_top_is_drawn_among_the_tied_tokens_only():
    logits = torch.tensor([[3.0, 9.0, 9.0, -1.0]])
    drawn = {sample(logits, temperature=1e-40, generator=torch.Generator().manual_seed(s)).item() for s in range(40)}
    assert drawn == {1, 2}


@pytest.mark.parametrize("temperature", [1e-40, 1e-300])
def test_generate_with_a_tiny_temperature_is_greedy(model, temperature):
    prompt = torch.tensor([[1, 2, 3]])
    greedy = generate(model, prompt, max_new_tokens=12, temperature=0.0)
    assert torch.equal(generate(model, prompt, max_new_tokens=12, temperature=temperature, seed=3), greedy)


BAD = [
    ("temperature", -0.5, "a finite number >= 0"),
    ("temperature", math.nan, "a finite number >= 0"),
    ("temperature", math.inf, "a finite number >= 0"),
    ("temperature", "0.7", "a finite number >= 0"),
    ("temperature", True, "a finite number >= 0"),
    ("top_k", 0, "None or an integer >= 1"),
    ("top_k", 2.5, "None or an integer >= 1"),
    ("top_k", True, "None or an integer >= 1"),
    ("max_new_tokens", -1, "an integer from 0 to 1_000_000"),
    ("max_new_tokens", 2.0, "an integer from 0 to 1_000_000"),
    ("max_new_tokens", 2**63, "an integer from 0 to 1_000_000"),
    ("seed", 2**64, "None or an integer from"),
    ("seed", 1.5, "None or an integer from"),
    ("overflow", "wrap", "'slide' or 'error'"),
    ("vocab_limit", 0, "None or an integer from 1 to 29"),
    ("vocab_limit", 30, "None or an integer from 1 to 29"),
]


@pytest.mark.parametrize(("name", "value", "expected"), BAD, ids=[f"{n}={v!r}" for n, v, _ in BAD])
def test_each_argument_out_of_its_bounds_is_an_input_error_naming_it(model, monkeypatch, name, value, expected):
    import blockspec.generation.tokens as generation

    for work in ("_check_memory", "check_finite_weights"):  # the first work generate does
        monkeypatch.setattr(generation, work, _no_work)
    arguments = {"max_new_tokens": 2, "temperature": 1.0} | {name: value}
    with pytest.raises(InputError) as caught:
        generate(model, torch.tensor([[1, 2]]), **arguments)
    problem = caught.value.problems[0]
    assert problem.path == name and expected in problem.message and repr(value)[:20] in problem.message, problem
    assert str(caught.value).count("\n") == 0


def _no_work(*args, **kwargs):
    raise AssertionError("generate began its work before refusing the argument")


@pytest.mark.parametrize(("ids", "found"), [
    (torch.tensor([[1.0, 2.0]]), "torch.float32"),
    (torch.tensor([[True, False]]), "torch.bool"),
    (torch.tensor([1, 2]), "shape (2,)"),
    (torch.zeros((1, 0), dtype=torch.long), "shape (1, 0)"),
    ("12", "'12'"),  # a list of prompts is a ragged batch (tests/test_gen_ragged.py); a string is no prompt
])
def test_prompt_ids_that_are_not_a_2d_integer_tensor_are_an_input_error(model, ids, found):
    with pytest.raises(InputError) as caught:
        generate(model, ids, max_new_tokens=1)
    assert caught.value.problems[0].path == "ids" and found in str(caught.value), caught.value


# -- the command line ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    return make_assets(tmp_path_factory.mktemp("assets"))


def test_the_command_with_a_tiny_temperature_prints_the_greedy_text(capsys, assets):
    line = ("generate", assets.char_ckpt, "--prompt", "to", "--max-new-tokens", "8", "--device", "cpu")
    code, tiny, err = run(capsys, *line, "--temperature", "1e-40")
    assert code == 0 and "internal error" not in err, err
    assert tiny == run(capsys, *line, "--temperature", "0")[1]


@pytest.mark.parametrize(("flag", "value", "said"), [
    ("--temperature", "nan", "--temperature: expected a number >= 0"),
    ("--temperature", "1e400", "--temperature: expected a number >= 0"),
    ("--top-k", "1.5", "--top-k: expected a positive integer"),
    ("--max-new-tokens", "1000001", "--max-new-tokens: expected an integer from 0 to 1_000_000"),
])
def test_the_commands_bounds_are_one_line_before_any_work(capsys, assets, flag, value, said):
    code, out, err = run(capsys, "generate", assets.char_ckpt / "missing", "--prompt", "to", flag, value)
    assert code == 2 and err.startswith(f"blockspec: error: {said}") and err.count("\n") == 1 and not out, err
