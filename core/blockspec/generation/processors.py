"""Logits processors for sampling: penalties, then filters, each a function of (B, |V|) logits alone.

``sample`` applies them in Hugging Face's order (``GenerationMixin._get_logits_processor``): the
repetition penalty, then the presence and frequency penalties, temperature, top-k, top-p, min-p.
Top-k is the one filter that commutes with the temperature (it keeps the same tokens whatever
monotone scale the logits get), so ``sample`` may take it before the temperature, as it always did.
A removed token's logit is -inf, so a filter never needs to know which others ran before it.
"""

from __future__ import annotations

from attrs import define

import torch


@define
class TokenCounts:
    """Per row, which ids the prompt holds and how often each id was generated, kept step by step.

    The repetition penalty (Hugging Face's) reads the prompt and the generated ids; the presence and
    frequency penalties (OpenAI's, vLLM's) read the generated ids only, so the two are kept apart.
    """

    in_prompt: torch.Tensor  # (B, |V|) bool
    generated: torch.Tensor  # (B, |V|) long: how often each id was drawn

    @classmethod
    def start(cls, prompt: torch.Tensor, width: int, padding: torch.Tensor | None = None) -> TokenCounts:
        """Counts for prompt ids (B, N) over the first ``width`` ids (those a step's logits cover); a ragged
        batch's ``padding`` (B,) left pad ids are no prompt's."""
        in_prompt = torch.zeros((prompt.shape[0], width), dtype=torch.bool, device=prompt.device)  # (B, |V|)
        sampleable = prompt < width  # an id past the logits is never drawn, so never penalized
        if padding is not None:
            sampleable &= torch.arange(prompt.shape[1], device=prompt.device) >= padding[:, None]  # (B, N)
        in_prompt.scatter_(1, torch.where(sampleable, prompt, 0), sampleable)
        return cls(in_prompt=in_prompt, generated=torch.zeros(in_prompt.shape, dtype=torch.long, device=prompt.device))

    def add(self, tokens: torch.Tensor) -> None:
        """Count the tokens (B, 1) a step drew."""
        self.generated.scatter_add_(1, tokens, torch.ones_like(tokens))

    def seen(self) -> torch.Tensor:
        """(B, |V|) bool: in the prompt or generated."""
        return self.in_prompt | (self.generated > 0)


def repetition_penalized(logits: torch.Tensor, seen: torch.Tensor, penalty: float) -> torch.Tensor:
    """Hugging Face's repetition penalty: a seen token's logit divided by ``penalty`` when > 0, multiplied when < 0."""
    penalized = torch.where(logits > 0, logits / penalty, logits * penalty)
    return torch.where(seen, penalized, logits)


def presence_frequency_penalized(logits: torch.Tensor, generated: torch.Tensor, presence: float,
                                 frequency: float) -> torch.Tensor:
    """OpenAI's penalties over the generated tokens: logit - presence * [count > 0] - frequency * count."""
    return logits - presence * (generated > 0).to(logits.dtype) - frequency * generated.to(logits.dtype)


def temperature_scaled(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """Logits whose softmax is softmax(logits / temperature), computed so that no temperature > 0 gives NaN.

    The temperature divides each logit's distance from the largest, never the logit itself: the
    distances are <= 0 and the largest stays 0, so however small the temperature (1e-40 is a float32
    subnormal, 1e-300 rounds to 0) nothing overflows to inf. A tiny temperature is then what its
    limit is: every draw among the likeliest tokens, i.e. greedy.
    """
    below = logits - logits.amax(dim=-1, keepdim=True)  # (B, |V|): <= 0, the likeliest at 0
    return torch.where(below == 0, 0.0, below / temperature)  # 0/0 (a temperature that rounds to 0) is no NaN


def top_k_filtered(logits: torch.Tensor, top_k: int) -> torch.Tensor:
    """Only the ``top_k`` largest logits (and any tied with the k-th) stay; the rest become -inf."""
    if top_k >= logits.shape[-1]:
        return logits
    kth = logits.topk(top_k, dim=-1).values[:, -1:]  # (B, 1)
    return logits.masked_fill(logits < kth, float("-inf"))


def top_p_filtered(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """Nucleus sampling, as Hugging Face computes it: drop the least likely tokens whose mass together is at most
    1 - ``top_p``; the likeliest token always stays."""
    ascending, order = logits.sort(dim=-1)  # (B, |V|) each
    cumulative = ascending.softmax(dim=-1).cumsum(dim=-1)  # (B, |V|)
    drop = cumulative <= 1 - top_p
    drop[:, -1] = False  # the likeliest stays
    return logits.masked_fill(drop.scatter(1, order, drop), float("-inf"))


def min_p_filtered(logits: torch.Tensor, min_p: float) -> torch.Tensor:
    """Drop tokens less likely than ``min_p`` times the likeliest one's probability (the likeliest always stays)."""
    probabilities = logits.softmax(dim=-1)  # (B, |V|)
    top = probabilities.amax(dim=-1, keepdim=True)  # (B, 1)
    return logits.masked_fill(probabilities < min_p * top, float("-inf"))
