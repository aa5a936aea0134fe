"""``--model blockspec`` agrees with ``--model hf`` on the exported copy (issue 24, "the harness agrees").

A tiny GPT-2-shaped checkpoint with a BPE tokenizer, and its ``export-hf`` copy, run the same two local
tasks (multiple choice, rolling log-likelihood) offline: every document's log-likelihoods and the
accuracies agree to 1e-4. A spec no family exports (ALiBi) is scored too, and its rolling
log-likelihood is what a plain forward pass over each window gives.

``--model hf`` runs with ``logits_cache=False``: with its cache on (the default), lm_eval 0.4.13's HFLM scored
one of these rolling documents 0.6 nats lower than it scores the same windows one at a time; without it,
HFLM and blockspec agree on every window.
"""

from __future__ import annotations

import math
import os

os.environ.setdefault("HF_DATASETS_OFFLINE", "1")  # before the harness imports datasets: local files only
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest  # noqa: E402

lm_eval = pytest.importorskip("lm_eval")
pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

import torch  # noqa: E402


from .harness_tasks import MULTIPLE_CHOICE, ROLLING, rolling_documents  # noqa: E402

TOLERANCE = 1e-4
TASKS = [MULTIPLE_CHOICE, ROLLING]


def run(model, root) -> dict:
    from lm_eval.tasks import TaskManager

    return lm_eval.simple_evaluate(model=model, tasks=TASKS, task_manager=TaskManager(include_path=str(root / "tasks")),
                                   bootstrap_iters=0)


def per_document(results: dict, task: str) -> list:
    """Each document's responses (log-likelihood and greedy-ness per choice, or a rolling log-likelihood)."""
    return [sample["resps"] for sample in sorted(results["samples"][task], key=lambda s: s["doc_id"])]


def flat(values) -> list[float]:
    return [float(v) for v in _leaves(values)]


def _leaves(values):
    for value in values:
        if isinstance(value, (list, tuple)):
            yield from _leaves(value)
        else:
            yield value


@pytest.fixture(scope="module")
def both(sources):
    from lm_eval.models.huggingface import HFLM

    from blockspec.evaluate.harness import BlockspecLM

    ours = run(BlockspecLM(sources / "learned", batch_size=4), sources)
    theirs = run(HFLM(pretrained=str(sources / "export"), batch_size=4, device="cpu", dtype="float32",
                      logits_cache=False), sources)  # its one-token-continuation cache: see the module doc
    return ours, theirs


@pytest.mark.parametrize("task", TASKS)
def test_every_documents_log_likelihoods_agree_with_hf_on_the_export(both, task):
    ours, theirs = both
    found, expected = flat(per_document(ours, task)), flat(per_document(theirs, task))
    assert len(found) == len(expected) > 20
    assert max(abs(a - b) for a, b in zip(found, expected)) <= TOLERANCE


def test_accuracies_and_rolling_metrics_agree_with_hf_on_the_export(both):
    ours, theirs = both
    for task, metrics in ((MULTIPLE_CHOICE, ("acc,none", "acc_norm,none")),
                          (ROLLING, ("word_perplexity,none", "byte_perplexity,none", "bits_per_byte,none"))):
        for metric in metrics:
            found, expected = ours["results"][task][metric], theirs["results"][task][metric]
            assert abs(found - expected) <= TOLERANCE * max(1.0, abs(expected)), (task, metric)
    accuracy = ours["results"][MULTIPLE_CHOICE]["acc,none"]
    assert 0.0 < accuracy < 1.0  # the choices are told apart, not all tied


def test_a_spec_no_family_exports_is_scored_as_its_own_forward_pass_scores_it(sources):
    """ALiBi: no ``--model hf`` copy exists; each document's rolling log-likelihood is Σ log p of its tokens
    over the harness's windows (the end-of-text token first), each window one plain forward pass."""
    from lm_eval.utils import get_rolling_token_windows, make_disjoint_window

    from blockspec.evaluate.harness import BlockspecLM

    model = BlockspecLM(sources / "alibi", batch_size=3)
    results = run(model, sources)
    assert 0.0 <= results["results"][MULTIPLE_CHOICE]["acc,none"] <= 1.0
    for number in (0, 3):
        ids = model.tok_encode(rolling_documents()[number]["text"])
        windows = [make_disjoint_window(w) for w in get_rolling_token_windows(
            token_list=ids, prefix_token=model.eot_token_id, max_seq_len=64, context_len=1)]
        expected = sum(window_score(model.model, context, continuation) for context, continuation in windows)
        assert math.isclose(float(per_document(results, ROLLING)[number][0][0]), expected, abs_tol=TOLERANCE)


def window_score(model, context: list[int], continuation: list[int]) -> float:
    ids = (context + continuation)[:-1]
    with torch.no_grad():
        logprobs = torch.log_softmax(model(torch.tensor([ids])).float(), dim=-1)[0, -len(continuation):]  # (C, |V|)
    return float(logprobs.gather(1, torch.tensor(continuation)[:, None]).sum())
