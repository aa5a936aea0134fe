"""Speculative decoding: greedy output is the target's own, sampled output follows the target's distribution."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import blockspec
from blockspec.generation.acceptance import accepted, accepted_greedy
from blockspec.generation.speculative import speculative_generate, speculative_stream
from blockspec.generation.tokens import filtered_probabilities, generate

from .specs import spec_text

pytestmark = pytest.mark.usefixtures("one_thread")  # micro models: see conftest

VOCAB = 29


def tiny_model(registry, positional: str, *, seed: int, d_model: int = 32, n_layers: int = 2, vocab: int = VOCAB,
               scale: float = 30.0, context: int = 16):
    """An untied head scaled up, so random-init logits are far apart (greedy ties cannot flip on rounding) and
    greedy decoding does not merely repeat the last token (as a tied head with large embeddings does)."""
    text = spec_text(name=f"tiny-{positional}", vocab_size=vocab, context_length=context, d_model=d_model,
                     n_layers=n_layers, n_heads=4, n_kv_heads=4, d_ff=48, positional=positional, tied=False)
    model = blockspec.build(blockspec.loads_spec(text, registry), registry=registry, seed=seed)
    with torch.no_grad():
        model.head.weight.mul_(scale)
    return model.eval()


def noisy_copy(registry, positional: str):
    """The target (seed 0) with noise on its head: a draft that agrees with it on about half the tokens."""
    model = tiny_model(registry, positional, seed=0)
    with torch.no_grad():
        weight = model.head.weight
        weight.add_(0.5 * weight.std() * torch.randn(weight.shape, generator=torch.Generator().manual_seed(5)))
    return model


def prompt(length: int = 5, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, VOCAB, (1, length), generator=torch.Generator().manual_seed(seed))


# -- the accept/reject rule ---------------------------------------------------------------------------------------


def markov(vocab: int, seed: int, *, zeros: int) -> torch.Tensor:
    """A random transition matrix (|V|, |V|) with ``zeros`` impossible next tokens per row (as a filter leaves)."""
    generator = torch.Generator().manual_seed(seed)
    logits = torch.randn((vocab, vocab), generator=generator, dtype=torch.float64)
    cut = torch.rand((vocab, vocab), generator=generator).argsort(dim=1)[:, :zeros]  # (|V|, zeros)
    return logits.scatter(1, cut, float("-inf")).softmax(dim=1)


def first_tokens(target: torch.Tensor, draft: torch.Tensor, k: int, m: int, trials: int, seed: int) -> torch.Tensor:
    """(trials, m): the first m tokens of speculative decoding from two Markov chains, every trial from state 0.

    Rounds go on until each trial has m tokens: a trial whose first round stops early continues from its last
    token, as decoding does, so the joint covers the residual draw, the bonus draw and the next round."""
    generator = torch.Generator().manual_seed(seed)
    scratch = m + k + 1  # where the tokens of trials already done (and the -1 tail) are written
    out = torch.full((trials, scratch + 1), -1, dtype=torch.long)
    length, last = torch.zeros(trials, dtype=torch.long), torch.zeros(trials, dtype=torch.long)
    while bool((length < m).any()):
        drafted, rows, state = [], [], last
        for _ in range(k):
            row = draft[state]  # (T, |V|)
            state = torch.multinomial(row, 1, generator=generator)[:, 0]
            drafted.append(state)
            rows.append(row)
        ids = torch.stack(drafted, dim=1) if k else torch.zeros((trials, 0), dtype=torch.long)  # k x (T,) -> (T, k)
        q = torch.stack(rows, dim=1) if k else torch.zeros((trials, 0, len(draft)), dtype=draft.dtype)
        p = target[torch.cat((last[:, None], ids), dim=1)]  # (T, 1) + (T, k) -> (T, k + 1) -> (T, k + 1, |V|)
        tokens, kept = accepted(p, q, ids, generator=generator)
        offset = torch.arange(k + 1)  # (k + 1,)
        keep = (offset <= kept[:, None]) & (length < m)[:, None]  # (T, k + 1)
        out.scatter_(1, torch.where(keep, length[:, None] + offset, scratch), tokens)
        last = tokens.gather(1, kept[:, None])[:, 0]
        length += kept + 1
    return out[:, :m]


def chi_square_p_value(samples: torch.Tensor, expected: torch.Tensor) -> float:
    """The p-value of the samples' cell counts (n,) ids against the probabilities ``expected`` (C,)."""
    observed = torch.bincount(samples, minlength=len(expected)).double()
    means = expected * len(samples)
    statistic = ((observed - means) ** 2 / means)[means > 0].sum()
    assert observed[means == 0].sum() == 0, "a sample fell in a cell of probability 0"
    df = torch.tensor(float((means > 0).sum() - 1), dtype=torch.float64)
    return float(torch.special.gammaincc(df / 2, statistic / 2))


@pytest.mark.parametrize("k", [1, 2, 3])
def test_the_first_three_tokens_follow_the_target_jointly(k):
    """100k trials of the rule on Markov chains over 5 tokens: the joint of the first 3 tokens is the target's.

    Three tokens cover, for every k, a residual draw, a bonus draw (token k + 1) and a following round."""
    vocab, m, trials = 5, 3, 100_000
    target, draft = markov(vocab, 0, zeros=1), markov(vocab, 1, zeros=2)
    got = first_tokens(target, draft, k, m, trials, seed=k)
    cells = (got[:, 0] * vocab + got[:, 1]) * vocab + got[:, 2]  # (T,): the joint's cell
    joint = target[0][:, None, None] * target[:, :, None] * target[None, :, :]  # p(a | 0) p(b | a) p(c | b)
    assert chi_square_p_value(cells, joint.flatten()) > 1e-4


def test_a_draft_equal_to_the_target_keeps_every_token_and_draws_the_bonus():
    p = torch.rand((1000, 4, 6), generator=torch.Generator().manual_seed(0)).softmax(dim=-1)
    drafted = torch.multinomial(p[:, :3].reshape(-1, 6), 1).view(1000, 3)  # (T * 3, 1) -> (T, 3)
    tokens, kept = accepted(p, p[:, :3], drafted)
    assert torch.equal(kept, torch.full((1000,), 3))
    assert torch.equal(tokens[:, :3], drafted) and bool((tokens[:, 3] >= 0).all())


def test_the_greedy_rule_keeps_the_draft_while_it_is_the_target_choice():
    choices = torch.tensor([[4, 2, 7, 1], [4, 2, 7, 1], [4, 2, 7, 1]])  # (T, K + 1)
    drafted = torch.tensor([[4, 2, 7], [4, 3, 7], [0, 2, 7]])
    tokens, kept = accepted_greedy(choices, drafted)
    assert kept.tolist() == [3, 1, 0]
    assert tokens.tolist() == [[4, 2, 7, 1], [4, 2, -1, -1], [4, -1, -1, -1]]


# -- the decoding loop --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("positional", ["rope", "learned"])
@pytest.mark.parametrize("new_tokens", [11, 25])  # learned, 25: past its 16 positions, where decoding slides
def test_greedy_output_is_the_target_own_whatever_the_draft(registry, positional, new_tokens):
    target = tiny_model(registry, positional, seed=0)
    unrelated = tiny_model(registry, positional, seed=1, d_model=16, n_layers=1)
    noisy = noisy_copy(registry, positional)
    for ids in (prompt(5, seed=1), prompt(2, seed=2)):
        alone = generate(target, ids, max_new_tokens=new_tokens, temperature=0.0)
        rates = {}
        for name, draft, k in (("itself", target, 1), ("itself", target, 4), ("noisy", noisy, 3),
                               ("unrelated", unrelated, 3)):
            out, stats = speculative_generate(target, draft, ids, max_new_tokens=new_tokens, temperature=0.0,
                                              draft_tokens=k)
            assert torch.equal(out, alone), (name, k)
            rates[name] = stats.acceptance_rate
        assert rates["itself"] == 1.0 and 0 < rates["noisy"] < 1 and rates["unrelated"] == 0.0  # never agrees here


@pytest.mark.parametrize("penalties", [dict(repetition_penalty=1.5), dict(presence_penalty=1.0, frequency_penalty=0.7),
                                       dict(repetition_penalty=0.7, frequency_penalty=-0.5)])
def test_greedy_output_with_penalties_is_the_target_own(registry, penalties):
    """Each drafted position is penalized for the drafted tokens before it, as plain decoding would be there."""
    target = tiny_model(registry, "rope", seed=0)
    ids = prompt(5, seed=1)
    alone = generate(target, ids, max_new_tokens=24, temperature=0.0, **penalties)
    assert not torch.equal(alone, generate(target, ids, max_new_tokens=24, temperature=0.0))  # they bite here
    rates = []
    for draft in (target, noisy_copy(registry, "rope")):
        out, stats = speculative_generate(target, draft, ids, max_new_tokens=24, temperature=0.0, draft_tokens=4,
                                          **penalties)
        assert torch.equal(out, alone)
        rates.append(stats.acceptance_rate)
    assert rates[0] == 1.0 and 0 < rates[1] < 1  # the target drafting for itself penalizes as it does


@pytest.fixture(scope="module")
def learned_pair(registry):
    """A learned-position target (16 positions) and drafts: itself, a noisy copy, an unrelated one of 8 positions."""
    target = tiny_model(registry, "learned", seed=0)
    return target, {"itself": target, "noisy": noisy_copy(registry, "learned"),
                    "short": tiny_model(registry, "learned", seed=1, context=8)}


@given(draft=st.sampled_from(["itself", "noisy", "short"]), k=st.integers(1, 6), n_prompt=st.integers(1, 18),
       new_tokens=st.integers(0, 20))
def test_greedy_output_is_the_target_own_at_every_edge_of_the_position_tables(learned_pair, draft, k, n_prompt,
                                                                             new_tokens):
    """Rounds near either table's end draft fewer tokens, and past the target's decoding slides as generate's does."""
    target, drafts = learned_pair
    ids = prompt(n_prompt, seed=n_prompt)
    alone = generate(target, ids, max_new_tokens=new_tokens, temperature=0.0)
    out, _ = speculative_generate(target, drafts[draft], ids, max_new_tokens=new_tokens, temperature=0.0,
                                  draft_tokens=k)
    assert torch.equal(out, alone)


def test_the_target_as_its_own_draft_yields_k_plus_1_tokens_per_target_pass(registry):
    target = tiny_model(registry, "rope", seed=0).train()
    stream = speculative_stream(target, target, prompt(), max_new_tokens=20, temperature=0.0, draft_tokens=4)
    tokens = list(stream)
    assert target.training  # eval mode only while the stream runs
    assert len(tokens) == 20 and all(token.shape == (1,) for token in tokens)
    assert (stream.stats.rounds, stream.stats.drafted, stream.stats.accepted) == (4, 16, 16)  # 4 x (4 + 1) tokens
    assert stream.stats.acceptance_rate == 1.0


def test_stops_end_the_output_where_generate_ends_it(registry):
    target, draft = tiny_model(registry, "rope", seed=0), tiny_model(registry, "rope", seed=1)
    alone = generate(target, prompt(), max_new_tokens=20, temperature=0.0)
    stop = int(alone[0, 9])  # the 5th new token
    out, _ = speculative_generate(target, target, prompt(), max_new_tokens=20, temperature=0.0, stop_ids=[stop])
    first = alone[0, 5:].tolist().index(stop)
    assert out[0].tolist() == alone[0, :5 + first + 1].tolist()
    text = "".join(map(chr, (97 + i for i in alone[0, 5:8].tolist())))  # a stop string over tokens 1..3
    out, _ = speculative_generate(target, draft, prompt(), max_new_tokens=20, temperature=0.0, stop=[text],
                                  decode=lambda ids: "".join(chr(97 + i) for i in ids))
    assert out[0].tolist() == alone[0, :8].tolist()


def test_the_first_sampled_token_follows_the_target_filtered_distribution(registry):
    """Seeded runs, end to end with both models' caches and filters: the first token's counts against the target's
    top-k, temperature 2 distribution over 8 ids, of which the draft's top 8 share one (it is mostly refused, so
    a residual drawn from p instead of max(0, p - q) gives p < 1e-13 here)."""
    target, draft = tiny_model(registry, "rope", seed=0, scale=4.0), tiny_model(registry, "rope", seed=1, scale=4.0)
    settings = dict(temperature=2.0, top_k=8)
    with torch.no_grad():
        expected = filtered_probabilities(target(prompt())[:, -1].float(), **settings)[0].double()
    firsts = [int(speculative_generate(target, draft, prompt(), max_new_tokens=2, draft_tokens=1, seed=seed,
                                       memory_check=False, **settings)[0][0, 5]) for seed in range(400)]
    assert chi_square_p_value(torch.tensor(firsts), expected) > 1e-4


# -- refusals -----------------------------------------------------------------------------------------------------


def test_a_draft_of_another_vocabulary_is_refused_before_any_work(registry):
    target, other = tiny_model(registry, "rope", seed=0), tiny_model(registry, "rope", seed=1, vocab=31)
    with pytest.raises(blockspec.InputError, match=r"^draft: expected a draft with the target's vocabulary "
                                                   r"\(29 token ids\), found a vocabulary of 31"):
        speculative_stream(target, other, prompt(), max_new_tokens=4)
    speculative_generate(other, target, prompt(), max_new_tokens=4, vocab_limit=29)  # both draw ids below 29
    with pytest.raises(blockspec.InputError, match="at least the 30 ids of vocab_limit"):
        speculative_stream(other, target, prompt(), max_new_tokens=4, vocab_limit=30)


@pytest.mark.parametrize("bad,match", [
    (dict(draft_tokens=0), "^draft_tokens: expected an integer from 1 to"),
    (dict(draft_tokens=True), "^draft_tokens: expected an integer from 1 to"),
    (dict(repetition_penalty=0.0), "^repetition_penalty: expected None or a number > 0"),
    (dict(num_samples=2), r"^num_samples: expected 1 with a draft model \(speculative decoding runs one sequence"),
    (dict(use_cache=False), "^use_cache: expected True with a draft model"),
    (dict(top_p=1.5), "^top_p: expected None or a number in"),
])
def test_bad_settings_are_refused(registry, bad, match):
    target = tiny_model(registry, "rope", seed=0)
    with pytest.raises(blockspec.InputError, match=match):
        speculative_stream(target, target, prompt(), max_new_tokens=4, **bad)


def test_a_batch_and_a_request_past_a_learned_table_are_refused(registry):
    target = tiny_model(registry, "learned", seed=0)
    with pytest.raises(blockspec.InputError, match=r"^ids: expected one prompt \(a batch of 1\).*found a batch of 2"):
        speculative_stream(target, target, torch.zeros((2, 3), dtype=torch.long), max_new_tokens=4)
    with pytest.raises(blockspec.ContextLengthError, match=r"positions up to 19.*at most 11 new tokens"):
        speculative_stream(target, target, prompt(), max_new_tokens=15, overflow="error")


def test_a_draft_with_non_finite_weights_is_refused_by_name(registry):
    target, draft = tiny_model(registry, "rope", seed=0), tiny_model(registry, "rope", seed=1)
    with torch.no_grad():
        draft.head.weight[0, 0] = float("nan")
    with pytest.raises(blockspec.NonFiniteError, match="^my draft: "):
        speculative_stream(target, draft, prompt(), max_new_tokens=4, draft_source="my draft")
