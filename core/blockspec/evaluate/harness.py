"""lm-evaluation-harness's model for any blockspec source: ``--model blockspec``.

A checkpoint, a training checkpoint or a Hugging Face directory is opened through the one room
(``open_source``) and scored with its own tokenizer (``Source.tokenizer()``), by the harness's
conventions as its ``hf`` model (HFLM) applies them, so a family model and its ``export-hf`` copy get
the same figures: an empty context is the begin-of-text token (or, without one, end-of-text),
rolling log-likelihoods use ``get_rolling_token_windows`` with a one-token context, a too-long request
loses tokens on the left. ``generate_until`` decodes greedily through blockspec's ``generate`` and
its KV cache.

The harness is optional (``pip install 'blockspec[eval]'``): importing blockspec never imports it;
importing this module does, and registers the model under the name ``blockspec``. The harness reads
no plugin entry points, so its own command learns the name only through this module:
``python -m blockspec.evaluate.harness run --model blockspec --model_args source=CKPT --tasks ...``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

try:
    import lm_eval
    from lm_eval.api.model import TemplateLM
    from lm_eval.api.registry import register_model
    from lm_eval.models.utils import Collator, handle_stop_sequences, normalize_gen_kwargs, postprocess_generated_text
    from lm_eval.utils import get_rolling_token_windows, make_disjoint_window
except ModuleNotFoundError as missing:  # only the harness itself: a broken install of it says its own error
    if missing.name is None or missing.name.split(".")[0] != "lm_eval":
        raise
    raise ModuleNotFoundError("scoring harness tasks needs lm-evaluation-harness: pip install 'blockspec[eval]'",
                              name="lm_eval") from None
import torch
import torch.nn.functional as F

from blockspec.data.tokenizer import BEGIN_OF_TEXT_NAMES, CharTokenizer, HFTokenizer, end_of_text
from blockspec.errors import InputError, Problem
from blockspec.modules.transformer import Transformer
from blockspec.sources import Source, open_source
from blockspec.spec.problems import did_you_mean
from blockspec.generation.tokens import generate

MODEL_NAME = "blockspec"
DEFAULT_MAX_GEN_TOKS = 256  # HFLM's
Request = tuple[Any, list[int], list[int]]  # (the request's strings or None, context ids, continuation ids)

__all__ = ["BlockspecLM", "MODEL_NAME", "evaluate_tasks", "results_table"]


class BlockspecLM(TemplateLM):
    """A blockspec model source as a harness model: batched log-likelihoods, greedy cached generation."""

    def __init__(self, source: str | Path | Source, batch_size: int | str = 1, device: str | torch.device | None = None,
                 prefix_token_id: int | str | None = None, max_gen_toks: int | str = DEFAULT_MAX_GEN_TOKS,
                 **ignored: Any) -> None:
        super().__init__()
        self.source = source if isinstance(source, Source) else open_source(source, with_weights=True)
        self._device = torch.device(device if device is not None else "cpu")
        self.model: Transformer = self.source.model(device=self._device).eval()
        self.tokenizer = _tokenizer_of(self.source)
        self.batch_size = _batch_size(batch_size)
        self.max_length = self.source.spec.model.context_length
        self.max_gen_toks = int(max_gen_toks)
        self._prefix = None if prefix_token_id is None else int(prefix_token_id)

    @property
    def device(self) -> torch.device:
        return self._device

    # ------------------------------------------------------------ the tokenizer, by the harness's conventions

    @property
    def eot_token_id(self) -> int:
        return self._special(end_of_text(self.tokenizer), "an end-of-text token")

    @property
    def prefix_token_id(self) -> int:
        """What an empty context is, as HFLM's: the begin-of-text token, else end-of-text, unless given."""
        if self._prefix is not None:
            return self._prefix
        special = self.tokenizer.special_tokens if isinstance(self.tokenizer, HFTokenizer) else {}
        begin = next((name for name in BEGIN_OF_TEXT_NAMES if name in special), None)
        return special[begin] if begin is not None else self.eot_token_id

    def _special(self, name: str | None, what: str) -> int:
        if name is None:
            raise InputError(Problem(file=str(self.source.path), message=f"its tokenizer has no {what}, which an "
                                     "empty context and rolling windows begin with",
                                     hint="give model_args prefix_token_id=ID"))
        return self.tokenizer.special_tokens[name]  # type: ignore[union-attr]  # only an HFTokenizer names one

    def tok_encode(self, string: str, add_special_tokens: bool | None = None, **kwargs: Any) -> list[int]:
        return self.tokenizer.encode(string)

    def tok_decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(ids)

    # ------------------------------------------------------------ log-likelihoods

    def _loglikelihood_tokens(self, requests: list[Request], disable_tqdm: bool = False,
                              **kwargs: Any) -> list[tuple[float, bool]]:
        """Longest first, ``batch_size`` at a time: (Σ log p(continuation), whether greedy decoding gives it)."""
        order = Collator(requests, sort_fn=lambda r: (-len(r[1] + r[2]), tuple(r[1] + r[2])))
        scored = []
        for chunk in order.get_batched(n=self.batch_size):
            scored.extend(self._scored(chunk))
        return order.get_original(scored)

    def _scored(self, chunk: Sequence[Request]) -> list[tuple[float, bool]]:
        # each input: context + continuation without its last token, cut on the left to the context length
        inputs = [(context + continuation)[-(self.max_length + 1):][:-1] for _, context, continuation in chunk]
        width = max(len(ids) for ids in inputs)
        batch = torch.zeros(len(inputs), width, dtype=torch.long)  # (B, N): right-padded; causal, so unseen
        for row, ids in enumerate(inputs):
            batch[row, :len(ids)] = torch.tensor(ids)
        with torch.inference_mode():
            logprobs = F.log_softmax(self.model(batch.to(self.device)).float(), dim=-1)  # (B, N, |V|)
        return [_continuation_score(logprobs[row, :len(ids)], continuation)
                for row, (ids, (_, _, continuation)) in enumerate(zip(inputs, chunk))]

    def loglikelihood_rolling(self, requests: list[Any], disable_tqdm: bool = False) -> list[float]:
        """Each text's log-likelihood over the harness's disjoint rolling windows, as HFLM scores them."""
        windows, counts = [], []
        for (text,) in (request.args for request in requests):
            own = [make_disjoint_window(w) for w in get_rolling_token_windows(
                token_list=self.tok_encode(text), prefix_token=self.prefix_token_id,
                max_seq_len=self.max_length, context_len=1)]
            windows.extend((None, *window) for window in own)
            counts.append(len(own))
        scores = [score for score, _ in self._loglikelihood_tokens(windows)]
        totals, start = [], 0
        for count in counts:
            totals.append(sum(scores[start:start + count]))
            start += count
        return totals

    # ------------------------------------------------------------ generation

    def generate_until(self, requests: list[Any], disable_tqdm: bool = False) -> list[str]:
        """Greedy continuations (a task's ``temperature`` is honoured), cut at the first stop string or end-of-text.

        Prompts of one length and settings go as one batch: blockspec's generate takes no padding mask."""
        order = Collator([request.args for request in requests], sort_fn=lambda r: (-len(self.tok_encode(r[0])), r[0]),
                         group_by="gen_kwargs", group_fn=lambda r: r[1])
        texts = []
        for chunk in order.get_batched(n=self.batch_size):
            texts.extend(self._generated(chunk))
        return order.get_original(texts)

    def _generated(self, chunk: Sequence[tuple[str, dict]]) -> list[str]:
        settings = normalize_gen_kwargs(chunk[0][1], self.max_gen_toks)
        until = handle_stop_sequences(settings.pop("until", None), eos=self._end_of_text_text())
        new_tokens = int(settings.pop("max_gen_toks"))
        keep = self.max_length - new_tokens  # HFLM's room for the prompt
        if keep <= 0:
            raise InputError(Problem(path="max_gen_toks", expected=f"fewer than the context length "
                                     f"{self.max_length}", found=str(new_tokens)))
        prompts = [self.tok_encode(context)[-keep:] for context, _ in chunk]
        by_length: dict[int, list[int]] = {}
        for row, prompt in enumerate(prompts):
            by_length.setdefault(len(prompt), []).append(row)
        texts = [""] * len(prompts)
        for length, rows in by_length.items():
            ids = torch.tensor([prompts[row] for row in rows], device=self.device)  # (b, length)
            out = generate(self.model, ids, max_new_tokens=new_tokens, temperature=float(settings.get("temperature", 0.0)),
                           vocab_limit=self.tokenizer.vocab_size, source=str(self.source.path))  # (b, length + new)
            for row, tokens in zip(rows, out[:, length:].tolist()):
                texts[row] = postprocess_generated_text(self.tok_decode(tokens), stop=until, think_end_token=None)
        return texts

    def _end_of_text_text(self) -> str | None:
        return end_of_text(self.tokenizer)


def _continuation_score(logprobs: torch.Tensor, continuation: list[int]) -> tuple[float, bool]:
    """logprobs (N, |V|) of one input -> Σ log p over its last len(continuation) positions, and greedy-ness."""
    tail = logprobs[-len(continuation):]  # (C, |V|)
    wanted = torch.tensor(continuation, device=tail.device)
    chosen = tail.gather(1, wanted[:, None])[:, 0]  # (C,)
    return float(chosen.sum()), bool((tail.argmax(dim=-1) == wanted).all())


def _tokenizer_of(source: Source) -> CharTokenizer | HFTokenizer:
    tokenizer = source.tokenizer()
    if tokenizer is None:
        raise InputError(Problem(file=str(source.path), message="this model source carries no tokenizer, and the "
                                 "harness scores text", hint="evaluate a checkpoint trained on text, or an export "
                                 "with its tokenizer.json"))
    return tokenizer


def _batch_size(given: int | str) -> int:
    if str(given).isdigit() and int(given) > 0:
        return int(given)
    raise InputError(Problem(path="batch_size", expected="a whole number of requests > 0 (no 'auto')",
                             found=repr(given)))


# ---------------------------------------------------------------- the library's call, and the harness's table


def evaluate_tasks(source: str | Path | Source, tasks: Sequence[str], *, include_path: str | Path | None = None,
                   limit: int | float | None = None, batch_size: int = 1, device: str | torch.device | None = None,
                   num_fewshot: int | None = None, bootstrap_iters: int = 100_000) -> dict[str, Any]:
    """``lm_eval.simple_evaluate`` of ``tasks`` (the harness's, and the YAML tasks under ``include_path``) with
    ``source``'s model; the harness's result dict (``results``, ``configs``, ``versions``, ...).

    An unknown task is refused before the model loads, with the closest name the harness knows."""
    from lm_eval.tasks import TaskManager

    manager = TaskManager(include_path=None if include_path is None else str(include_path))
    check_tasks(tasks, manager.all_tasks)
    model = BlockspecLM(source, batch_size=batch_size, device=device)
    return lm_eval.simple_evaluate(model=model, tasks=list(tasks), num_fewshot=num_fewshot, limit=limit,
                                   task_manager=manager, bootstrap_iters=bootstrap_iters)


def check_tasks(tasks: Sequence[str], known: Sequence[str]) -> None:
    """Every name one the harness knows (a task, group or tag); the first that is not, with did-you-mean."""
    if not tasks:
        raise InputError(Problem(path="tasks", expected="at least one task name", found="none"))
    for name in tasks:
        if name not in known:
            raise InputError(Problem(path="tasks", expected="a task the harness knows (lm_eval ls tasks)",
                                     found=repr(name), hint=did_you_mean(name, known)))


def results_table(results: dict[str, Any]) -> str:
    """The harness's own Markdown table of ``evaluate_tasks``' results (and of its groups, where there are)."""
    from lm_eval.utils import make_table

    table = make_table(results)
    return table + ("\n" + make_table(results, "groups") if results.get("groups") else "")


def harness_command() -> None:
    """The harness's own command line (``lm_eval run ...``, from ``sys.argv``), with ``--model blockspec`` known."""
    from lm_eval._cli import HarnessCLI
    from lm_eval.utils import setup_logging

    setup_logging()
    parser = HarnessCLI()
    parser.execute(parser.parse_args())


if __name__ == "__main__":  # python -m: this copy only runs the command; the module proper registers the model
    from blockspec.evaluate.harness import harness_command as command

    command()
else:
    register_model(MODEL_NAME)(BlockspecLM)
