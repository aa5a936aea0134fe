"""blockspec-heads: the language-model head (tied or untied) and a sequence classifier."""

from __future__ import annotations

from typing import Literal

from attrs import field, frozen

from blockspec.plugin import BuildContext, Register, hookimpl, positive

BLOCKSPEC_API = 1


@frozen(kw_only=True)
class LMHeadConfig:
    """Language-model head: (B, N, d) -> logits (B, N, |V|); tied reuses the embedding matrix."""

    tied: bool = True


@frozen(kw_only=True)
class ClassifierConfig:
    """Sequence classifier: pool the tokens (last or mean), then a linear layer to n_classes."""

    n_classes: int = field(validator=positive)
    pooling: Literal["last", "mean"] = "last"
    bias: bool = True


def build_lm(config: LMHeadConfig, ctx: BuildContext):
    from torch import nn

    from .modules import TiedLMHead

    if config.tied:
        return TiedLMHead(ctx.embedding)
    return nn.Linear(ctx.model.d_model, ctx.model.vocab_size, bias=False)


def build_classifier(config: ClassifierConfig, ctx: BuildContext):
    from .modules import Classifier

    return Classifier(ctx.model.d_model, config.n_classes, pooling=config.pooling, bias=config.bias)


@hookimpl
def blockspec_register(register: Register) -> None:
    register("head", "lm", LMHeadConfig, build_lm, promises=("lm",))
    register("head", "classifier", ClassifierConfig, build_classifier, promises=("classifier",))
