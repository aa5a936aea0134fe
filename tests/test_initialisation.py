"""The initialisation contract: [init] draws what a component declares in ``init_roles``, and nothing else.

A plugin's own initialisation survives the build; a residual projection is scaled because it is
declared one, whatever its name; the built-in model draws exactly what GPT-2's initialisation drew.
"""

from __future__ import annotations

import math
import types

import pytest
import torch
import torch.nn.functional as F
from attrs import frozen
from torch import nn

import blockspec
from blockspec import SpecError
from blockspec.assembly import assemble
from blockspec.plugin import Activation

from .conftest import SPECS
from .test_spec import BASE

pytestmark = pytest.mark.usefixtures("one_thread")


@frozen(kw_only=True)
class NoFields:
    """A test component without fields."""


class ZeroGatedGELU(Activation):
    """gelu(x)·(1 + gate(x)): the gate starts at zero (the identity), a mixing layer at PyTorch's default."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.gate = nn.Linear(width, width)
        nn.init.zeros_(self.gate.weight)
        nn.init.zeros_(self.gate.bias)
        self.mix = nn.Linear(width, width, bias=False)  # Kaiming-uniform, as nn.Linear draws it

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mix(F.gelu(x) * (1 + self.gate(x)))


class TwoLayerFFN(nn.Module):
    """An FFN whose residual output projection is named ``w_out``, not ``down``."""

    init_roles = {"w_in.weight": "std", "w_out.weight": "residual", "w_in.bias": "zero", "w_out.bias": "zero"}

    def __init__(self, d_model: int, d_ff: int, activation: nn.Module) -> None:
        super().__init__()
        self.w_in, self.act, self.w_out = nn.Linear(d_model, d_ff), activation, nn.Linear(d_ff, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w_out(self.act(self.w_in(x)))  # (B, N, d)


class MisdeclaredFFN(TwoLayerFFN):
    init_roles = {"w_in.weight": "std", "w_ot.weight": "residual"}


class MistypedFFN(TwoLayerFFN):
    init_roles = {"w_in.weight": "std", "w_out.weight": "residul"}


class BufferFFN(TwoLayerFFN):
    init_roles = {"scale": "zero"}

    def __init__(self, d_model: int, d_ff: int, activation: nn.Module) -> None:
        super().__init__(d_model, d_ff, activation)
        self.register_buffer("scale", torch.ones(d_model))


class GatedBranchFFN(nn.Module):
    """Reuses the core's dense FFN as a gated branch: its down projection is no residual one here."""

    init_roles = {"inner.down.weight": "std"}  # the outer declaration wins over FeedForward's "residual"

    def __init__(self, d_model: int, d_ff: int, activation: nn.Module) -> None:
        from blockspec.modules.feed_forward import FeedForward

        super().__init__()
        self.inner = FeedForward(d_model=d_model, d_ff=d_ff, activation=activation, bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(x) * self.inner(x)  # (B, N, d)


def _ffn(cls: type[nn.Module]):
    return lambda config, ctx: cls(ctx.model.d_model, ctx.model.d_ff, ctx.layer.activation("act"))


def init_test_plugin() -> types.ModuleType:
    plugin = types.ModuleType("init_test_plugin")

    @blockspec.hookimpl
    def blockspec_register(register):
        register("activation", "zero_gate", NoFields, lambda config, ctx: ZeroGatedGELU(ctx.model.d_ff),
                 promises=())
        register("ffn", "two_layer", NoFields, _ffn(TwoLayerFFN), promises=("position_wise",))
        register("ffn", "misdeclared", NoFields, _ffn(MisdeclaredFFN), promises=("position_wise",))
        register("ffn", "mistyped", NoFields, _ffn(MistypedFFN), promises=("position_wise",))
        register("ffn", "buffer", NoFields, _ffn(BufferFFN), promises=("position_wise",))
        register("ffn", "gated_branch", NoFields, _ffn(GatedBranchFFN), promises=("position_wise",))

    plugin.blockspec_register = blockspec_register
    return plugin


@pytest.fixture(scope="module")
def init_registry():
    return blockspec.load_registry(plugins=[(init_test_plugin(), "init-test", "0.0")])


def spec_with(registry, *tables: str) -> blockspec.ModelSpec:
    return blockspec.loads_spec(BASE + "".join(f"\n{table}\n" for table in tables), registry)


@pytest.fixture(params=[0, 10**12], ids=["deferred", "eager"])
def defer_from(request, monkeypatch):
    monkeypatch.setattr(assemble, "DEFER_FROM_PARAMETERS", request.param)


@pytest.mark.usefixtures("defer_from")
def test_a_components_own_initialisation_is_kept(init_registry):
    text = BASE.replace('[activation]\nuse = "gelu"', '[activation]\nuse = "zero_gate"')
    assert text != BASE
    model = blockspec.build(blockspec.loads_spec(text, init_registry), registry=init_registry, seed=0)
    act = model.blocks[0].ffn.act
    assert act.gate.weight.abs().max().item() == 0.0  # main: redrawn N(0, 0.02), |w| up to ~0.09
    assert act.gate.bias.abs().max().item() == 0.0
    bound = 1 / math.sqrt(act.mix.in_features)  # Kaiming-uniform: U(-bound, bound), std bound/sqrt(3)
    assert act.mix.weight.abs().max() <= bound
    assert act.mix.weight.std().item() == pytest.approx(bound / math.sqrt(3), rel=0.05)
    assert model.blocks[0].ffn.down.weight.std().item() == pytest.approx(0.02 / 2, rel=0.1)  # the spec's still drawn


@pytest.mark.usefixtures("defer_from")
def test_a_declared_residual_projection_is_scaled_whatever_its_name(init_registry):
    spec = spec_with(init_registry, '[ffn]\nuse = "two_layer"', "[init]\nstd = 0.05")
    ffn = blockspec.build(spec, registry=init_registry, seed=0).blocks[1].ffn
    assert ffn.w_out.weight.std().item() == pytest.approx(0.05 / math.sqrt(2 * 2), rel=0.1)  # main: 0.05
    assert ffn.w_in.weight.std().item() == pytest.approx(0.05, rel=0.1)
    assert torch.equal(ffn.w_out.bias, torch.zeros_like(ffn.w_out.bias))
    unscaled = spec_with(init_registry, '[ffn]\nuse = "two_layer"', "[init]\nstd = 0.05\nresidual_scaling = false")
    ffn = blockspec.build(unscaled, registry=init_registry, seed=0).blocks[1].ffn
    assert ffn.w_out.weight.std().item() == pytest.approx(0.05, rel=0.1)


@pytest.mark.parametrize(("use", "words"), [
    ("misdeclared", r"MisdeclaredFFN\.init_roles: 'w_ot\.weight' names no parameter; "
                    r"did you mean 'w_out\.weight'\?"),
    ("mistyped", r"MistypedFFN\.init_roles: 'w_out\.weight': unknown role 'residul', expected one of "
                 r"'std', 'residual', 'zero', 'token_embedding'; did you mean 'residual'\?"),
    ("buffer", r"BufferFFN\.init_roles: 'scale' is a Tensor, not a parameter"),
])
def test_a_declaration_the_module_cannot_keep_is_a_spec_error(init_registry, use, words):
    spec = spec_with(init_registry, f'[ffn]\nuse = "{use}"')
    with pytest.raises(SpecError, match=rf"\$\.ffn: init-test:{use} cannot be built: {words}"):
        blockspec.build(spec, registry=init_registry, seed=0)


def test_an_outer_declaration_wins_over_its_childs(init_registry):
    spec = spec_with(init_registry, '[ffn]\nuse = "gated_branch"', "[init]\nstd = 0.05")
    inner = blockspec.build(spec, registry=init_registry, seed=0).blocks[0].ffn.inner
    assert inner.down.weight.std().item() == pytest.approx(0.05, rel=0.1)  # not 0.05/sqrt(4)
    assert inner.up.weight.std().item() == pytest.approx(0.05, rel=0.1)  # FeedForward's own declaration
    assert inner.down.bias.abs().max().item() == 0.0


def gpt2_rule(model: nn.Module) -> list[tuple[str, str]]:
    """What GPT-2's initialisation drew before the contract, by module type and path suffix, in draw order."""
    drawn = []
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            drawn.append((f"{name}.weight", "residual" if name.endswith(("attn.proj", "ffn.down")) else "std"))
            drawn += [(f"{name}.bias", "zero")] if module.bias is not None else []
        elif isinstance(module, nn.Embedding):
            drawn.append((f"{name}.weight", "token_embedding" if module is model.embedding else "std"))
    return drawn


FIRST_PARTY = [p.stem for p in sorted(SPECS.glob("*.toml"))  # a mixture of experts draws more now
               if '"moe"' not in p.read_text(encoding="utf-8")]
SMALL = {"vocab_size": 61, "context_length": 32, "d_model": 32, "n_layers": 2, "d_ff": 24}
VARIED = 6  # layers of a spec with [[layers]] entries: enough for each to select one (Gemma 3's five to one)


@pytest.mark.parametrize("stem", FIRST_PARTY)
@pytest.mark.parametrize("head", [None, {"use": "lm", "tied": False, "logit_softcap": 30.0},
                                  {"use": "classifier", "n_classes": 3}], ids=["spec", "capped", "classifier"])
def test_first_party_models_draw_what_gpt2_initialisation_drew(registry, stem, head):
    """The same tensors with the same roles in the same order: the same weights for the same seed."""
    from blockspec.assembly.initialisation import init_plan

    data = blockspec.spec_to_dict(blockspec.load_spec(SPECS / f"{stem}.toml", registry))
    data["model"].update(SMALL, n_heads=4, **({"n_kv_heads": 2} if "n_kv_heads" in data["model"] else {}),
                         **({"head_dim": 16} if "head_dim" in data["model"] else {}),
                         **({"n_layers": VARIED} if data.get("layers") else {}))
    data.update({"head": head} if head else {})
    model = blockspec.build(blockspec.structure_spec(data, registry), registry=registry, device="meta")
    names = {id(p): n for n, p in model.named_parameters()}
    assert [(names[id(p)], role) for p, role in init_plan(model).roles] == gpt2_rule(model)


def test_a_model_with_instance_declarations_copies_and_pickles(registry):
    import copy
    import pickle

    text = BASE.replace('[head]\nuse = "lm"', '[head]\nuse = "lm"\ntied = false')
    assert text != BASE
    model = blockspec.build(blockspec.loads_spec(text, registry), registry=registry, seed=0)
    assert model.head.init_roles == {"weight": "std"}  # declared on the instance by build_lm
    twin = copy.deepcopy(model)
    assert twin.head.init_roles == {"weight": "std"} and torch.equal(twin.head.weight, model.head.weight)
    assert pickle.loads(pickle.dumps(model.head)).init_roles == {"weight": "std"}
