"""results.json -> a Markdown report: ratios blockspec / peer against the issue's targets."""

from __future__ import annotations

SMALL = "tiny-shakespeare"  # the size where per-call Python overhead dominates
TARGETS = {  # (metric, peer) -> (target for the big cases, target for the tiny one)
    ("forward", "reference"): (1.02, 1.05), ("forward_backward", "reference"): (1.02, 1.05),
    ("forward", "hf"): (0.95, 0.80), ("forward_backward", "hf"): (0.95, 0.80),
    ("memory", "reference"): (1.05, 1.05), ("build", "reference"): (1.10, 1.10),
}


def _target(metric: str, peer: str, case: str) -> float | None:
    pair = TARGETS.get((metric, peer))
    return None if pair is None else pair[1 if case == SMALL else 0]


def _verdict(ratio: float, target: float | None) -> str:
    if target is None:
        return f"{ratio:.3f}"
    return f"{ratio:.3f} {'ok' if ratio <= target else 'MISS'} (<= {target:.2f})"


def _ms(timing: dict[str, float]) -> str:
    return f"{timing['median_s'] * 1e3:.2f} [{timing['min_s'] * 1e3:.2f}-{timing['max_s'] * 1e3:.2f}]"


def speed_rows(name: str, data: dict[str, object]) -> list[str]:
    rows = []
    for metric, label in (("forward", "forward, no grad"), ("forward_backward", "forward + backward"),
                          ("build", "build")):
        if metric not in data.get("speed", {}) and metric not in data:
            continue
        section = data["speed"][metric] if metric in data.get("speed", {}) else data[metric]
        t, ratios, paired, mins = (section[k] for k in ("timings", "ratios", "ratios_paired", "ratios_min"))
        cells = [_ms(t[c]) for c in ("blockspec", "reference", "hf")]
        verdicts = [f"{_verdict(ratios[p], _target(metric, p, name))}; paired {paired[p]:.3f}; min {mins[p]:.3f}"
                    for p in ("reference", "hf")]
        rows.append(f"| {name} | {label} (ms) | {' | '.join(cells)} | {' | '.join(verdicts)} |")
        if "load_spec" in section:
            rows.append(f"| {name} | reading the spec file (ms) | {_ms(section['load_spec'])} | | | | |")
    if "memory" in data:
        mem = {c: data["memory"][c]["peak_bytes"] for c in ("blockspec", "reference", "hf")}
        saved = {c: data["memory"][c]["saved_for_backward_bytes"] for c in ("blockspec", "reference", "hf")}
        for label, values, target in (("peak training-step memory", mem, "memory"),
                                      ("saved for backward", saved, None)):
            cells = [f"{values[c] / 2**20:.1f}" for c in ("blockspec", "reference", "hf")]
            verdicts = [_verdict(values["blockspec"] / values[p], target and _target(target, p, name))
                        for p in ("reference", "hf")]
            rows.append(f"| {name} | {label} (MiB) | {' | '.join(cells)} | {' | '.join(verdicts)} |")
    return rows


def gflops_rows(results: dict[str, object]) -> list[str]:
    machine = results["machine"]
    peak = max(machine["matmul_2048_gflops"], machine.get("matmul_2048_gflops_end", 0.0))  # the best this run saw
    rows = []
    for name, data in results["cases"].items():
        if "speed" not in data:
            continue
        for metric, flops_key in (("forward", "forward_flops"), ("forward_backward", "train_flops")):
            t = data["speed"][metric]["timings"]
            rates = [data["speed"][flops_key] / t[c]["median_s"] / 1e9 for c in ("blockspec", "reference", "hf")]
            cells = [f"{r:.1f} ({r / peak:.0%})" for r in rates]
            rows.append(f"| {name} | {metric.replace('_', ' + ')} | {' | '.join(cells)} |")
    return rows


def compile_rows(results: dict[str, object]) -> list[str]:
    rows = []
    for name, data in results["cases"].items():
        c = data.get("compile")
        if c:
            rows.append(f"| {name} | {c['graphs']} | {c['graph_breaks']} | {c['first_call_s']:.1f} | "
                        f"{_ms(c['timings']['eager'])} | {_ms(c['timings']['compiled'])} | "
                        f"{c['compiled_over_eager']:.3f} (paired {c['compiled_over_eager_paired']:.3f}) | "
                        f"{c['matches_eager']} |")
    return rows


def generation_rows(results: dict[str, object]) -> list[str]:
    rows = []
    for name, data in results["cases"].items():
        g = data.get("generation")
        if not g:
            continue
        if g["status"] != "measured":
            rows.append(f"| {name} | {g['status']}: {g['reason']} | | | | |")
            continue
        tps = g["tokens_per_s"]
        ok = "ok" if tps["blockspec"] >= tps["hf"] else "MISS"
        rows.append(f"| {name} | measured | {tps['blockspec']:.1f} | {tps['hf']:.1f} | "
                    f"{tps['blockspec'] / tps['hf']:.3f} {ok} (>= 1.00) | {g['same_tokens']} |")
    return rows


def speculative_rows(results: dict[str, object]) -> list[str]:
    rows = []
    for name, data in results["cases"].items():
        s = (data.get("generation") or {}).get("speculative")
        if not s:
            continue
        tps, rate = s["tokens_per_s"], s["acceptance_rate"]
        rows.append(f"| {name} | {s['draft_layers']} | {s['draft_tokens']} | {'-' if rate is None else f'{rate:.2f}'} | "
                    f"{tps['plain']:.1f} | {tps['speculative']:.1f} | {s['speedup']:.3f} | {s['same_tokens']} |")
    return rows


def ragged_rows(results: dict[str, object]) -> list[str]:
    rows = []
    for name, data in results["cases"].items():
        r = (data.get("generation") or {}).get("ragged")
        if not r:
            continue
        ok = "ok" if r["speedup"] >= 3.0 else "MISS"
        rows.append(f"| {name} | {_ms(r['timings']['ragged'])} | {_ms(r['timings']['one_by_one'])} | "
                    f"{r['speedup']:.2f} (paired {r['speedup_paired']:.2f}) {ok} (>= 3.00) | {r['same_tokens']} |")
    return rows


def eval_rows(results: dict[str, object]) -> list[str]:
    rows = []
    for name, data in results["cases"].items():
        e = data.get("eval")
        if not e:
            continue
        tps = e["tokens_per_s"]
        ok = "ok" if e["ratio"] >= e["target"] else "MISS"
        rows.append(f"| {name} | {tps['eval']:,.0f} | {tps['bare']:,.0f} | {e['ratio']:.3f} {ok} (>= {e['target']}) |")
    return rows


def graph_break_lines(results: dict[str, object]) -> list[str]:
    checks = results.get("graph_breaks")
    if not checks:
        return []
    broken = [c for c in checks if c["breaks"] or c["graphs"] != 1]
    combos = len({c["combo"] for c in checks})
    lines = [f"{combos} first-party positional x norm x activation combinations, eval and train (dropout 0.1): "
             f"{sum(c['breaks'] for c in checks)} graph breaks in {len(checks)} checks "
             f"({'ok' if not broken else 'MISS'})."]
    lines += [f"- {c['combo']} training={c['training']}: {c['breaks']} breaks: {c['reasons'][:2]}" for c in broken]
    return lines


def registry_lines(results: dict[str, object]) -> list[str]:
    r = results.get("registry")
    if not r:
        return []
    d, listing, meta = r["discovery"], r["list"], r["meta_count_70b"]
    load_ok = "ok" if d["load_registry_s"] < 0.05 else "MISS"
    meta_ok = "ok" if meta["seconds"] < 1.0 else "MISS"
    return [
        f"- plugin discovery + registry build (`load_registry()`): {d['load_registry_s'] * 1e3:.1f} ms "
        f"{load_ok} (< 50 ms); `import blockspec` before it: {d['import_s'] * 1e3:.1f} ms; "
        f"{d['components']} components; torch imported: {d['torch_imported']} "
        f"(`-X importtime` torch lines: {d['importtime_torch_lines']})",
        f"- `blockspec list` wall time: {listing['blockspec_list_s'] * 1e3:.0f} ms "
        f"(a bare `python -c pass`: {listing['python_startup_s'] * 1e3:.0f} ms)",
        f"- meta-device count of Llama-2-70B: {meta['parameters']:,} parameters in {meta['seconds']:.3f} s "
        f"{meta_ok} (< 1 s)",
    ]


def adapter_lines(results: dict[str, object]) -> list[str]:
    """LoRA vs full fine-tuning and vs PEFT's LoRA: step time, optimizer state, memory, against issue 26's targets."""
    a = results.get("adapters")
    if not a:
        return []
    head = (f"GPT-2 small, batch {a['batch']} x {a['tokens']} tokens, LoRA rank {a['rank']}, alpha {a['alpha']:g} "
            f"on {', '.join(a['targets'])} (PEFT: {', '.join(a['peft_targets'])}); the largest loss difference "
            f"LoRA vs PEFT over the timed steps: {a['loss_difference_lora_peft']:.2e}.")
    paired = a["ratios_paired"]
    rows = [_adapter_row("trainable parameters", a["trainable"], "{:,}", None),
            _adapter_row("step (ms)", {n: t["median_s"] * 1e3 for n, t in a["timings"].items()}, "{:.1f}", STEP_TARGETS,
                         f"; paired {paired['lora/full']:.3f}", f"; paired {paired['lora/peft']:.3f}"),
            _adapter_row("optimizer state (MiB)", _mib(a["optimizer_state_bytes"]), "{:.2f}", (0.02, None))]
    if "memory" in a:
        for key, label, targets in (("peak_bytes", "peak training memory (MiB)", (1.0, None)),
                                    ("step_peak_bytes", "a step's peak above its resident set (MiB)", None)):
            rows.append(_adapter_row(label, _mib({n: m[key] for n, m in a["memory"].items()}), "{:.1f}", targets))
    return [head, "", "| metric | full | LoRA | PEFT LoRA | LoRA / full | LoRA / PEFT |",
            "| --- | --- | --- | --- | --- | --- |", *rows]


STEP_TARGETS = (1.0, 1.0)  # issue 26: LoRA's step at most full fine-tuning's and PEFT's


def _mib(values: dict[str, int]) -> dict[str, float]:
    return {name: value / 2**20 for name, value in values.items()}


def _adapter_row(label: str, values: dict[str, float], fmt: str, targets: tuple[float | None, float | None] | None,
                 *notes: str) -> str:
    """One row: full, LoRA and PEFT's figures, then LoRA / full and LoRA / PEFT against their targets."""
    cells = [fmt.format(values[n]) for n in ("full", "lora", "peft")]
    ratios = [values["lora"] / values[peer] for peer in ("full", "peft")]
    verdicts = [_verdict(r, t) + note for r, t, note in zip(ratios, targets or (None, None), notes or ("", ""))]
    return f"| {label} | {' | '.join(cells)} | {' | '.join(verdicts)} |"

def markdown(results: dict[str, object]) -> str:
    m = results["machine"]
    out = [
        "# blockspec benchmark",
        "",
        f"torch {m['torch']}, {m['torch_threads']} threads, python {m['python']}; run {m['started']} to "
        f"{m.get('finished', '?')}. fp32 matmul 2048^2: {m['matmul_2048_gflops']:.1f} GFLOP/s at the start, "
        f"{m.get('matmul_2048_gflops_end', float('nan')):.1f} at the end.",
        "",
        *([f"Note: {m['compile_rerun']}.", ""] if m.get("compile_rerun") else []),
        "Times are medians [min-max] over interleaved rounds; ratios are blockspec / peer "
        "(ratio of medians, against the target; then the median of per-round ratios and the ratio of the minima).",
        "",
        "| case | metric | blockspec | reference | Hugging Face | vs reference | vs Hugging Face |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, data in results["cases"].items():
        out += speed_rows(name, data)
    sections = [
        ("Achieved GFLOP/s (share of the fp32 2048^2 matmul throughput, the better of start and end)",
         ["| case | pass | blockspec | reference | Hugging Face |", "| --- | --- | --- | --- | --- |"], gflops_rows),
        ("torch.compile(fullgraph=True) vs eager, blockspec forward (no grad)",
         ["| case | graphs | breaks | first call (s) | eager (ms) | compiled (ms) | compiled / eager | same logits |",
          "| --- | --- | --- | --- | --- | --- | --- | --- |"], compile_rows),
        ("KV-cache generation, greedy, batch 1 (tokens/s)",
         ["| case | status | blockspec | Hugging Face generate | ratio | same tokens |",
          "| --- | --- | --- | --- | --- | --- |"], generation_rows),
        ("Speculative decoding, greedy, batch 1: a draft of the target's first layers (tokens/s)",
         ["| case | draft layers | K | acceptance | target alone | with the draft | speedup | same tokens |",
          "| --- | --- | --- | --- | --- | --- | --- | --- |"], speculative_rows),
        ("Ragged batch: 8 prompts of different lengths in one batch vs one by one, greedy (ms per 8 prompts)",
         ["| case | ragged batch | one by one | speedup | same tokens |", "| --- | --- | --- | --- | --- |"],
         ragged_rows),
        ("blockspec eval vs a bare batched forward pass over the same windows (tokens/s)",
         ["| case | eval | bare forward | ratio |", "| --- | --- | --- | --- |"], eval_rows),
        ("Graph breaks", [], graph_break_lines),
        ("Registry costs", [], registry_lines),
        ("Adapter fine-tuning: LoRA vs full fine-tuning and vs PEFT's LoRA, same model, batches and AdamW", [],
         adapter_lines),
    ]
    for title, header, rows in sections:
        body = rows(results)
        if body:
            out += ["", f"## {title}", "", *header, *body]
    return "\n".join(out) + "\n"
