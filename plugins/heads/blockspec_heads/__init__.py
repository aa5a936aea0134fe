"""blockspec-heads: the language-model head (tied or untied) and a sequence classifier."""

from __future__ import annotations

from typing import Literal

from attrs import field, frozen

from attrs.validators import optional

from blockspec.plugin import OMIT_DEFAULT, BuildContext, Register, greater_than, hookimpl, positive

BLOCKSPEC_API = 1


@frozen(kw_only=True)
class LMHeadConfig:
    """Language-model head: (B, N, d) -> logits (B, N, |V|); tied reuses the embedding matrix.

    logit_softcap: logits -> cap·tanh(logits/cap) (Gemma 2's final-logit softcap); None: not capped.
    bias: a learned bias per token added to the logits, before the cap (Phi-1.5, Phi-2); its own vector
    when tied.
    """

    tied: bool = True
    logit_softcap: float | None = field(default=None, validator=optional(greater_than(0.0)))
    bias: bool = field(default=False, metadata=OMIT_DEFAULT)


@frozen(kw_only=True)
class ClassifierConfig:
    """Sequence classifier: pool the tokens (last or mean), then a linear layer to n_classes."""

    n_classes: int = field(validator=positive)
    pooling: Literal["last", "mean"] = "last"
    bias: bool = True


def build_lm(config: LMHeadConfig, ctx: BuildContext):
    from blockspec.plugin import declare_init

    from .modules import TiedLMHead, UntiedLMHead

    bias = {"bias": "zero"} if config.bias else {}
    if config.tied:
        return declare_init(TiedLMHead(ctx.embedding, logit_softcap=config.logit_softcap, bias=config.bias), bias)
    head = UntiedLMHead(ctx.model.d_model, ctx.model.vocab_size, logit_softcap=config.logit_softcap, bias=config.bias)
    return declare_init(head, {"weight": "std", **bias})


def build_classifier(config: ClassifierConfig, ctx: BuildContext):
    from .modules import Classifier

    return Classifier(ctx.model.d_model, config.n_classes, pooling=config.pooling, bias=config.bias)


@hookimpl
def blockspec_register(register: Register) -> None:
    register("head", "lm", LMHeadConfig, build_lm, promises=("lm", "tie_option", "logit_softcap", "logit_columns",
                                                                "compiles"))
    register("head", "classifier", ClassifierConfig, build_classifier, promises=("classifier", "compiles"))
