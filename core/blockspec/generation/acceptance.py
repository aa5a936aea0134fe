"""The accept/reject rule of speculative sampling (Leviathan et al. 2023; Chen et al. 2023), pure and vectorised.

A draft proposes K tokens x_1..x_K from its distributions q_1..q_K; the target scores them in one pass, which
gives its distributions p_1..p_K at the same positions and p_{K+1} after the last. x_i is kept with probability
min(1, p_i(x_i) / q_i(x_i)); at the first refusal the next token is drawn from norm(max(0, p_i - q_i)) instead,
and when all K are kept a bonus token is drawn from p_{K+1}. Every output token then follows the target's
distribution exactly, whatever the draft: the draft only decides how many tokens one target pass yields.

A leading dimension holds independent trials: decoding has one, a statistical test runs 100k in one call.
"""

from __future__ import annotations

import torch


def accepted(target: torch.Tensor, draft: torch.Tensor, drafted: torch.Tensor, *,
             generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """target (T, K+1, |V|) and draft (T, K, |V|) probabilities, drafted ids (T, K) -> (tokens (T, K+1), kept (T,)).

    Trial t's output is ``tokens[t, :kept[t] + 1]``: its ``kept[t]`` drafted tokens that passed, then one drawn
    token (the residual's or the bonus); the positions after it are -1.
    """
    trials, k = drafted.shape
    p_x = target[:, :k].gather(2, drafted[..., None])[..., 0]  # (T, K, |V|) -> (T, K): p_i(x_i)
    q_x = draft.gather(2, drafted[..., None])[..., 0]  # (T, K, |V|) -> (T, K): q_i(x_i) > 0, as x_i was drawn from it
    u = torch.rand((trials, k), generator=generator, device=drafted.device, dtype=p_x.dtype)
    kept = (u * q_x < p_x).long().cumprod(dim=1).sum(dim=1)  # (T,): u < p/q, without dividing by q
    return _joined(drafted, kept, _next_drawn(target, draft, kept, generator)), kept


def accepted_greedy(choices: torch.Tensor, drafted: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Temperature 0: the target's argmax ids (T, K+1) and drafted ids (T, K) -> ``accepted``'s (tokens, kept).

    A drafted token passes while it is the target's own choice; the next token is the target's choice after it."""
    k = drafted.shape[1]
    kept = (drafted == choices[:, :k]).long().cumprod(dim=1).sum(dim=1)  # (T,)
    return _joined(drafted, kept, choices.gather(1, kept[:, None])[:, 0]), kept


def _next_drawn(target: torch.Tensor, draft: torch.Tensor, kept: torch.Tensor,
                generator: torch.Generator | None) -> torch.Tensor:
    """(T,) the token after the kept ones: from norm(max(0, p - q)) at the first refusal, from p after all K."""
    trials, _, vocab = target.shape
    rows = kept[:, None, None].expand(trials, 1, vocab)  # (T, 1, |V|): each trial's position kept[t]
    p = target.gather(1, rows)[:, 0]  # (T, K+1, |V|) -> (T, |V|)
    beyond = draft.new_zeros((trials, 1, vocab))  # no draft after the K-th position: the residual there is p
    q = torch.cat((draft, beyond), dim=1).gather(1, rows)[:, 0]  # (T, K, |V|) + (T, 1, |V|) -> (T, |V|)
    residual = (p - q).clamp(min=0)
    residual = torch.where(residual.sum(dim=-1, keepdim=True) > 0, residual, p)  # p = q up to rounding: p itself
    return torch.multinomial(residual, 1, generator=generator)[:, 0]  # (T, 1) -> (T,)


def _joined(drafted: torch.Tensor, kept: torch.Tensor, drawn: torch.Tensor) -> torch.Tensor:
    """(T, K+1): the drafted tokens up to ``kept``, then ``drawn``, then -1."""
    tokens = torch.cat((drafted, drawn[:, None]), dim=1)  # (T, K) + (T, 1) -> (T, K+1)
    tokens = tokens.scatter(1, kept[:, None], drawn[:, None])
    position = torch.arange(tokens.shape[1], device=tokens.device)  # (K+1,)
    return torch.where(position > kept[:, None], -1, tokens)
