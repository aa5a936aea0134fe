"""`blockspec explore`: the data it exports, and the page driven in a real headless Chromium.

The browser tests use the system's Chromium (Debian's `chromium` package; .ci/run installs
it) through Playwright, pointed at it with ``executable_path``; nothing downloads a browser.
Set BLOCKSPEC_CHROMIUM to use another binary, BLOCKSPEC_SCREENSHOTS=DIR to keep screenshots.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
from pathlib import Path

import pytest
import torch

import blockspec
from blockspec.cli import main
from blockspec.inspect.explore.export import MAX_COLS, explorer_data, norm_steps, positional_view, stride_index
from blockspec.inspect.explore.page import render
from blockspec.inspect.trace import trace

SPECS = Path(__file__).resolve().parents[1] / "examples" / "specs"


def write_page(tmp_dir: Path, stem: str, *argv: str) -> Path:
    out = tmp_dir / f"{stem}.html"
    assert main(["explore", str(SPECS / f"{stem}.toml"), *argv, "--out", str(out)]) == 0
    return out


# -- the data and the file, without a browser ------------------------------------------------------------


def test_stride_index_keeps_at_most_the_limit():
    assert stride_index(64, 128) == (list(range(64)), 1)
    indices, step = stride_index(50257, MAX_COLS)
    assert step == 393 and len(indices) <= MAX_COLS and indices[-1] < 50257


def test_exported_stages_match_the_trace(example_spec, registry):
    model = blockspec.build(example_spec("tiny-shakespeare"), registry=registry, seed=0).eval()
    ids = [32, 53, 1, 40, 43]
    result = trace(model, torch.tensor([ids]))
    data = explorer_data(model, result, ids=ids, label_of=lambda i: "To be"[ids.index(i)] if i in ids else str(i),
                         weights="random", tokenizer=None)
    assert [s["name"] for s in data["stages"]] == result.names()
    weights = next(s for s in data["stages"] if s["name"] == "blocks.0.attn.weights")
    assert weights["heads"] == 4 and weights["shape"] == [4, 5, 5] and len(weights["values"]) == 4 * 5 * 5
    assert weights["values"][:5] == [1.0, 0.0, 0.0, 0.0, 0.0]
    logits = next(s for s in data["stages"] if s["name"] == "logits")
    assert logits["cols"] == list(range(65)) and logits["note"] == ""
    assert data["norm"]["input_stage"] == "positional.embed" and len(data["norm"]["tokens"]) == 5
    assert [t["p"] for t in data["next_token"]] == sorted((t["p"] for t in data["next_token"]), reverse=True)


@pytest.mark.parametrize(("layout", "partner"), [("half", 8), ("interleaved", 1)])
def test_rotary_hands_are_read_off_rotate_for_any_layout(registry, layout, partner):
    spec = blockspec.structure_spec({
        "model": {"vocab_size": 11, "context_length": 32, "d_model": 32, "n_layers": 1, "n_heads": 2, "d_ff": 8},
        "positional": {"use": "rope", "layout": layout}, "norm": {"use": "rmsnorm"},
        "activation": {"use": "relu"}, "head": {"use": "lm"}}, registry)
    view = positional_view(blockspec.build(spec, registry=registry, seed=0))
    assert view["kind"] == "rotary" and len(view["hands"]) == 8  # head_dim 16: 8 pairs
    assert view["hands"][0]["label"] == f"pair 0 (features 0, {partner})"
    for hand in view["hands"]:
        angles = torch.tensor(hand["angles"], dtype=torch.float64)
        turn = torch.remainder(angles[3:] - angles[:-3] + math.pi, 2 * math.pi) - math.pi  # p -> p + 3
        assert torch.allclose(turn, turn[0].expand_as(turn), atol=2e-3)  # the same at every p


def test_norm_steps_end_in_the_modules_own_output():
    norm = torch.nn.LayerNorm(6, eps=1e-5)
    torch.nn.init.normal_(norm.weight)
    torch.nn.init.normal_(norm.bias)
    x = torch.randn(6, generator=torch.Generator().manual_seed(0))
    steps = dict(norm_steps(norm, x))
    assert list(steps) == ["input", "centred", "normalised", "output"]
    assert torch.allclose(steps["normalised"] * norm.weight + norm.bias, steps["output"], atol=1e-5)
    assert torch.allclose(dict(norm_steps(norm, 7 * x))["normalised"], steps["normalised"], atol=1e-4)


def test_page_is_self_contained(tmp_path):
    page = write_page(tmp_path, "tiny-shakespeare", "--text", "To be").read_text()
    assert "default-src 'none'" in page  # the page may not fetch anything
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)
    assert "__BLOCKSPEC_DATA__" not in page


def test_data_cannot_close_the_script_element():
    html = render({"evil": "</script><script>alert(1)</script>"})
    assert "</script><script>alert" not in html
    payload = html.split('id="blockspec-data">', 1)[1].split("</script>", 1)[0]
    assert json.loads(payload) == {"evil": "</script><script>alert(1)</script>"}


# -- in a real browser -------------------------------------------------------------------------------------


def chromium_path() -> str | None:
    return os.environ.get("BLOCKSPEC_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def browser():
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (requirements-dev.txt)")
    executable = chromium_path()
    if executable is None:
        pytest.skip("no Chromium found: install Debian's chromium package (apt-get install chromium), "
                    "or set BLOCKSPEC_CHROMIUM to a Chromium binary")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        yield browser
        browser.close()


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("explore")
    return {
        "tiny": write_page(tmp, "tiny-shakespeare", "--text", "To be"),
        "sinusoidal": write_page(tmp, "tiny-shakespeare-sinusoidal", "--text", "To be, or"),
        "llama": write_page(tmp, "llama-style", "--text", "To be"),
    }


def open_page(browser, path: Path):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    errors: list[str] = []
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(path.as_uri())
    return page, errors


def stage_data(page) -> list[dict]:
    return page.evaluate("D.stages.map(s => ({name: s.name, shape: s.shape, heads: s.heads}))")


@pytest.mark.parametrize("which", ["tiny", "sinusoidal", "llama"])
def test_loads_without_console_errors_and_shows_every_stage(browser, pages, which):
    page, errors = open_page(browser, pages[which])
    stages = stage_data(page)
    assert page.locator("#stage-list button").count() == len(stages)
    repeated = re.compile(r"blocks\.([2-9]|\d\d)\.")  # blocks 0 and 1 stand for the rest (time)
    for stage in (s for s in stages if not repeated.match(s["name"])):
        page.click(f"#stage-list button[data-name='{stage['name']}']")
        assert page.inner_text("#stage-name") == stage["name"]
        assert page.inner_text("#stage-shape") == "[" + ", ".join(map(str, stage["shape"])) + "]"
    assert errors == []
    page.close()


def test_selecting_a_stage_shows_its_shape_op_and_section(browser, pages):
    page, errors = open_page(browser, pages["tiny"])
    page.click("#stage-list button[data-name='blocks.1.ffn.act']")
    assert page.inner_text("#stage-shape") == "[5, 256]"
    assert page.inner_text("#stage-op") == "GELU: FFN hidden"
    assert page.inner_text("#stage-component") == "activation:gelu (blockspec-activations)"
    assert page.inner_text("#stage-section") == "7.4 FFN"
    page.click("#stage-list button[data-name='probs']")
    assert page.locator("#next-token-bars rect.bar").count() == 10
    assert errors == []


def cell_values(page, row: int) -> list[float]:
    return page.eval_on_selector_all(f"#stage-heatmap rect.cell[data-row='{row}']",
                                     "cells => cells.map(c => Number(c.dataset.value))")


def test_first_row_of_every_head_reads_one_then_zeros(browser, pages):
    page, errors = open_page(browser, pages["llama"])
    page.click("#stage-list button[data-name='blocks.0.attn.weights']")
    for block in ("0", "7"):
        page.select_option("#block-select", label=block)
        assert page.inner_text("#stage-name") == f"blocks.{block}.attn.weights"
        for head in range(8):
            page.select_option("#head-select", str(head))
            assert cell_values(page, 0) == [1.0, 0.0, 0.0, 0.0, 0.0]
            assert sum(cell_values(page, 4)) == pytest.approx(1.0, abs=1e-3)
    page.hover("#stage-heatmap rect.cell[data-row='0'][data-col='0']")
    assert page.inner_text("#tooltip") == "query position 0 'T', key position 0 'T': 1.0000"
    assert errors == []


def norm_bars(page, step: str) -> list[float]:
    return page.eval_on_selector_all(f"#norm-bars-{step} rect.bar", "bars => bars.map(b => Number(b.dataset.value))")


def set_range(page, selector: str, value: int) -> None:
    page.eval_on_selector(selector, "(el, v) => { el.value = v; el.dispatchEvent(new Event('input')); }", value)


@pytest.mark.parametrize("which", ["tiny", "llama"])  # LayerNorm, RMSNorm
def test_scaling_the_input_leaves_the_normalised_values_still(browser, pages, which):
    page, errors = open_page(browser, pages[which])
    page.select_option("#norm-token", "2")
    before_input, before = norm_bars(page, "input"), norm_bars(page, "normalised")
    scales = page.evaluate("D.norm.scales")
    set_range(page, "#norm-scale", len(scales) - 1)
    assert page.inner_text("#norm-scale-value") == f"×{scales[-1]:g}"
    after_input, after = norm_bars(page, "input"), norm_bars(page, "normalised")
    assert after_input == pytest.approx([scales[-1] * v for v in before_input], rel=1e-3, abs=1e-6)
    # norm(s·x) = x / sqrt(ms(x) + eps/s²): the same direction, and only eps can make it grow a little
    ratios = [a / b for a, b in zip(after, before) if abs(b) > 0.05]
    assert len(ratios) > len(before) // 2 and max(ratios) - min(ratios) < 4e-3
    assert 0.999 < sum(ratios) / len(ratios) < 1.02
    assert max(map(abs, after)) > 0.5
    assert errors == []


def test_clock_hands_turn_by_the_same_angle_at_every_position(browser, pages):
    page, errors = open_page(browser, pages["sinusoidal"])
    hands = page.locator("#clocks .clock").count()
    assert hands == 16

    def turns(position: int) -> list[float]:
        set_range(page, "#pos-slider", position)
        return page.eval_on_selector_all("#clocks .turn", "els => els.map(e => Number(e.dataset.turn))")

    page.fill("#pos-offset", "3")
    first = turns(0)
    assert first[0] == pytest.approx(3 * 57.2958 - 360 * round(3 * 57.2958 / 360), abs=0.1)  # ω_0 = 1 rad/position
    for position in (5, 17, 40):
        assert turns(position) == pytest.approx(first, abs=0.05)
    assert errors == []


def test_screenshots_come_out(browser, pages, tmp_path):
    keep = os.environ.get("BLOCKSPEC_SCREENSHOTS")
    out = Path(keep) if keep else tmp_path
    out.mkdir(parents=True, exist_ok=True)
    page, errors = open_page(browser, pages["tiny"])
    page.click("#stage-list button[data-name='blocks.0.attn.weights']")
    shots = [out / "explorer.png", out / "explorer-norm.png"]
    page.screenshot(path=str(shots[0]))
    page.locator("#norm").screenshot(path=str(shots[1]))
    for shot in shots:
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
    assert errors == []
