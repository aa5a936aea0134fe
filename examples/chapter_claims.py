"""Measure the chapter's numerical claims with blockspec and print what comes out.

    python examples/chapter_claims.py

tests/test_chapter_claims.py imports these functions and asserts the figures;
docs/chapter-claims.md shows them next to the chapter's.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch

import blockspec

SPECS = Path(__file__).resolve().parent / "specs"
D_MODEL = 512
SHIFTS = (1, 7, 25)
FIT_POSITIONS = 2048


def wavelengths(d_model: int = D_MODEL, pairs: tuple[int, ...] = (0, 64, 255)) -> dict[int, float]:
    """Tokens per full turn of pair i: 2π / ω_i."""
    from blockspec_positional.sinusoidal import frequencies

    omega = frequencies(d_model)
    return {i: 2 * math.pi / omega[i].item() for i in pairs}


def rotations(k: int, d_model: int = D_MODEL) -> torch.Tensor:
    """R(ω_i k) = [[cos, sin], [-sin, cos]] for every pair: (d/2, 2, 2), float64."""
    from blockspec_positional.sinusoidal import frequencies

    angle = frequencies(d_model) * k
    cos, sin = angle.cos(), angle.sin()
    return torch.stack((torch.stack((cos, sin), -1), torch.stack((-sin, cos), -1)), -2)


def shift_pairs(k: int, n_positions: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """PE(pos) and PE(pos + k) for pos < n, as (d/2, n, 2) pair slices of the float32 table, cast to dtype."""
    from blockspec_positional.sinusoidal import sinusoidal_table

    table = sinusoidal_table(n_positions + k, D_MODEL).to(dtype)  # (n + k, d)
    before = table[:n_positions].view(n_positions, D_MODEL // 2, 2).transpose(0, 1)  # (d/2, n, 2)
    after = table[k:].view(n_positions, D_MODEL // 2, 2).transpose(0, 1)  # (d/2, n, 2)
    return before, after


def fit_whole_map(k: int, n_positions: int = FIT_POSITIONS, dtype: torch.dtype = torch.float32) -> dict[str, float]:
    """One d x d map M with PE(pos) M ≈ PE(pos + k), by QR least squares in ``dtype``.

    Returns the largest prediction error, and how far the fitted 2x2 diagonal blocks are from
    R(ω_i k)ᵀ (row-vector convention) for pairs 0..64 and for all pairs.
    """
    before, after = shift_pairs(k, n_positions, dtype)
    x = before.transpose(0, 1).reshape(n_positions, D_MODEL)  # (n, d)
    y = after.transpose(0, 1).reshape(n_positions, D_MODEL)  # (n, d)
    fitted = torch.linalg.lstsq(x, y, driver="gels").solution  # (d, d)
    error = (x @ fitted - y).abs().max().item()
    grid = fitted.double().view(D_MODEL // 2, 2, D_MODEL // 2, 2)  # (pair, 2, pair, 2)
    blocks = grid.diagonal(dim1=0, dim2=2).permute(2, 0, 1)  # (d/2, 2, 2)
    deviation = (blocks - rotations(k).transpose(-1, -2)).abs().amax((-1, -2))  # (d/2,)
    return {"error": error, "blocks_0_64": deviation[:65].max().item(), "blocks_all": deviation.max().item()}


def fit_each_pair(k: int, n_positions: int = FIT_POSITIONS, dtype: torch.dtype = torch.float64) -> dict[str, float]:
    """A separate 2x2 least-squares fit per pair: largest error, largest block deviation, and its pair."""
    before, after = shift_pairs(k, n_positions, dtype)
    fitted = torch.linalg.lstsq(before, after, driver="gels").solution  # (d/2, 2, 2)
    error = (before @ fitted - after).abs().max().item()
    deviation = (fitted.double() - rotations(k).transpose(-1, -2)).abs().amax((-1, -2))  # (d/2,)
    return {"error": error, "blocks_all": deviation.max().item(), "worst_pair": int(deviation.argmax())}


def _registry() -> blockspec.Registry:
    return blockspec.load_registry()


def positional_parameters(stem: str) -> int:
    """Parameters of the positional component of an example spec."""
    registry = _registry()
    model = blockspec.build(blockspec.load_spec(SPECS / f"{stem}.toml", registry), registry=registry,
                            device="meta")
    return sum(p.numel() for p in model.positional.parameters())


def layernorm(values: list[float]) -> list[float]:
    """The norms plugin's LayerNorm (fresh: γ = 1, β = 0, eps = 1e-5) on one token."""
    registry = _registry()
    component = registry.get("norm", "layernorm")
    model = blockspec.ModelConfig(vocab_size=2, context_length=2, d_model=len(values), n_layers=0,
                                  n_heads=1, d_ff=1)
    embedding = torch.nn.Embedding(model.vocab_size, model.d_model)
    norm = component.build(component.config_cls(), blockspec.BuildContext(model=model, embedding=embedding))
    with torch.no_grad():
        return norm(torch.tensor([values])).squeeze(0).tolist()


def parameter_figures() -> dict[str, int]:
    """Exact counts on the meta device, split the chapter's way."""
    registry = _registry()
    small = blockspec.build(blockspec.load_spec(SPECS / "gpt2-small.toml", registry), registry=registry,
                            device="meta")
    medium = blockspec.build(blockspec.load_spec(SPECS / "gpt2-medium.toml", registry), registry=registry,
                             device="meta")

    def count(module: torch.nn.Module) -> int:
        return sum(p.numel() for p in module.parameters())

    return {
        "output_layer": small.embedding.weight.numel(),  # tied: the head is the embedding matrix
        "gpt2_small": count(small),
        "gpt2_small_blocks": count(small.blocks),
        "gpt2_small_embeddings": count(small.embedding) + count(small.positional),
        "gpt2_medium_blocks": count(medium.blocks),
    }


def residual_gradients(n_layers: int = 48, scale: float = 1e-2, d_model: int = 64,
                       seed: int = 0) -> dict[str, float]:
    """||∂loss/∂input|| / ||∂loss/∂output|| through n FFN sublayers scaled by ``scale``, with and without x + f(x)."""
    from blockspec.modules.feed_forward import FeedForward

    registry = _registry()
    gelu = registry.get("activation", "gelu")
    generator = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    layers = [FeedForward(d_model=d_model, d_ff=4 * d_model, activation=gelu.build(gelu.config_cls(), None),
                          bias=True).double() for _ in range(n_layers)]
    with torch.no_grad():
        for layer in layers:
            layer.down.weight.mul_(scale)  # the sublayer's output is scaled near zero
            layer.down.bias.mul_(scale)
    return {"with_residual": _gradient_ratio(layers, True, d_model, generator),
            "without_residual": _gradient_ratio(layers, False, d_model, generator)}


def _gradient_ratio(layers: list, residual: bool, d_model: int, generator: torch.Generator) -> float:
    x = torch.randn(4, d_model, generator=generator, dtype=torch.float64, requires_grad=True)
    h = x
    for layer in layers:
        h = h + layer(h) if residual else layer(h)
    h.retain_grad()
    direction = torch.randn(h.shape, generator=generator, dtype=torch.float64)
    (h * direction).sum().backward()
    return (x.grad.norm() / h.grad.norm()).item()


def main() -> None:
    print("sinusoidal wavelengths at d_model 512 (tokens per turn):")
    for pair, tokens in wavelengths().items():
        print(f"  pair {pair:3d}: {tokens:,.2f}")
    print(f"\nshift map PE(pos) -> PE(pos+k), least squares over positions 0..{FIT_POSITIONS - 1}, d_model 512:")
    for k in SHIFTS:
        for dtype in (torch.float32, torch.float64):
            whole = fit_whole_map(k, dtype=dtype)
            print(f"  k={k:2d} whole 512x512 map, {str(dtype)[6:]}: max error {whole['error']:.2e}; "
                  f"2x2 blocks vs R(ω k): pairs 0-64 within {whole['blocks_0_64']:.1e}, "
                  f"all pairs within {whole['blocks_all']:.2f}")
        for dtype, n in ((torch.float64, FIT_POSITIONS), (torch.float64, 512), (torch.float32, FIT_POSITIONS)):
            pair = fit_each_pair(k, n, dtype)
            print(f"  k={k:2d} per pair 2x2, {str(dtype)[6:]}, {n} positions: max error {pair['error']:.2e}; "
                  f"blocks within {pair['blocks_all']:.1e} (worst pair {pair['worst_pair']})")
    print("\npositional parameters at d_model 64, context 64:")
    print(f"  learned:    {positional_parameters('tiny-shakespeare'):,}")
    print(f"  sinusoidal: {positional_parameters('tiny-shakespeare-sinusoidal'):,}")
    print("\nLayerNorm (γ = 1, β = 0, eps = 1e-5):")
    for values in ([2.0, 4.0, 6.0, 8.0], [4.0, 8.0, 12.0, 16.0], [1.0, 1.0, 1.0, 5.0]):
        print(f"  {values} -> {[round(v, 3) for v in layernorm(values)]}")
    print("\nparameters (exact, meta device):")
    for name, value in parameter_figures().items():
        print(f"  {name:22s} {value:>13,}")
    ratios = residual_gradients()
    print("\ngradient norm at the input / at the output, 48 FFN sublayers scaled by 0.01 (float64):")
    print(f"  with residuals:    {ratios['with_residual']:.3f}")
    print(f"  without residuals: {ratios['without_residual']:.3e}")


if __name__ == "__main__":
    main()
