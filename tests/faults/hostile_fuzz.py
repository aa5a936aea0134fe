"""The hostile-directory fuzz of import-hf (issue 22's acceptance), run as its own process so its peak memory is
its own: ``python -m tests.faults.hostile_fuzz --cases N --seed S`` prints one JSON report.

Each case takes one of the families' tiny exported directories and applies one to three mutations:
config fields (sizes at, past and far past their bounds, wrong types, deleted keys), config bytes, the weights'
header and bytes, shards and their index, links (out of the directory to a planted secret, to
/proc/self/environ, devices, dangling, chained, inside), FIFOs, directories and huge sparse files under a
carried name, a Hugging Face cache snapshot (and one whose blobs/ links out), pickles. The case is imported
through the library (every case) and the command line (every ``--cli-every``-th, with ``--force`` over a good
checkpoint). Reported: each outcome, every internal error (anything but a BlockspecError, a hang, an exit code
other than 0 or 2, a stderr line that is not ``blockspec: error: ...``), every place the secret turned up
(a message, a carried file, an output file), a good checkpoint changed by a refused import, and ru_maxrss.
A case is reproduced from its seed and index alone.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import struct
import sys
import tempfile
from collections import Counter
from pathlib import Path

from blockspec.errors import BlockspecError
from blockspec.interop import import_hf
from blockspec.interop.config_reader import SIZE_BOUNDS
from blockspec.interop.hf_layout import CARRIED, CARRIED_LIMIT

from ..test_hostile_checkpoints import hang_guard
from .hostile_dirs import CANARY, FAMILIES, cli, holds_canary, plant_canary, pristine, registry, tree, write

HANG_GUARD_S = 30
GROWTH_NOTED = 64 << 20
WEIGHTS, INDEX = "model.safetensors", "model.safetensors.index.json"
EXTRA_KEYS = ("layer_types", "rope_scaling", "rope_parameters", "rope_theta", "head_dim", "sliding_window",
              "tie_word_embeddings", "architectures", "model_type", "partial_rotary_factor", "num_local_experts")
LINK_TARGETS = ("secret", "../secret.txt", "/proc/self/environ", "/dev/zero", "/dev/null", "gone.json", ".", "..",
                "chain", "config.json")


def size_values(rng: random.Random, key: str) -> object:
    bound = SIZE_BOUNDS.get(key, 1 << 20)
    return rng.choice([0, 1, 2, 3, 7, -1, bound, bound + 1, 10**12, 2**63, 2**64 + 1, -(10**12)])


def odd_value(rng: random.Random, key: str) -> object:
    choices = [lambda: size_values(rng, key), lambda: rng.choice([0.5, 1e308, -0.0, float("inf")]),
               lambda: rng.choice([True, False, None]), lambda: rng.choice(["", "x" * 10_000, "\x1b[31mred", "1"]),
               lambda: [rng.choice(["full_attention", "sliding_attention", "x", 1, None, {}, []])
                        for _ in range(rng.choice([0, 1, 2, 3, 5000]))],
               lambda: {"rope_type": rng.choice(["default", "yarn", "llama3", "linear", "dynamic", "longrope", 3]),
                        "factor": rng.choice([0, -1, 2.0, 1e300, "x"]),
                        rng.choice(["original_max_position_embeddings", "beta_fast", "zzz"]): size_values(rng, key)}]
    return rng.choice(choices)()


# ---------------------------------------------------------------- the mutations: (rng, directory, secret) -> what


def _config(hf: Path) -> dict | None:
    """The config as a dict, or None when an earlier mutation made it something else."""
    path = hf / "config.json"
    try:
        config = json.loads(path.read_bytes()) if path.is_file() and not path.is_symlink() else None
    except (ValueError, RecursionError):
        return None
    return config if isinstance(config, dict) else None


def config_field(rng, hf: Path, secret: Path) -> str:
    config = _config(hf)
    if config is None:
        return "config field (no config object)"
    key = rng.choice([*config, *SIZE_BOUNDS, *EXTRA_KEYS])
    config[key] = size_values(rng, key) if key in SIZE_BOUNDS and rng.random() < 0.6 else odd_value(rng, key)
    (hf / "config.json").write_text(json.dumps(config, allow_nan=True))
    return f"config {key} = {json.dumps(config[key])[:60]}"


def config_delete(rng, hf: Path, secret: Path) -> str:
    config = _config(hf)
    if not config:
        return "config delete (no config object)"
    key = rng.choice(sorted(config))
    del config[key]
    (hf / "config.json").write_text(json.dumps(config))
    return f"config without {key}"


def config_bytes(rng, hf: Path, secret: Path) -> str:
    choice = rng.choice(["empty", "open", "list", "null", "random", "nested", "huge", "utf16", "bom"])
    data = {"empty": b"", "open": b"{", "list": b"[]", "null": b"null", "random": rng.randbytes(200),
            "nested": b"[" * 100_000, "utf16": '{"a": 1}'.encode("utf-16"),
            "bom": b"\xef\xbb\xbf" + json.dumps(_config(hf)).encode()}.get(choice)
    _replace(hf / "config.json")
    if choice == "huge":
        with open(hf / "config.json", "wb") as handle:
            handle.truncate(64 * 1024 * 1024)  # sparse, NUL-padded
    else:
        (hf / "config.json").write_bytes(data)
    return f"config bytes {choice}"


def _header(path: Path) -> tuple[dict, bytes] | None:
    """A plain weights file's header and data, or None when an earlier mutation made it something else."""
    if not path.is_file() or path.is_symlink():
        return None
    raw = path.read_bytes()
    try:
        (length,) = struct.unpack("<Q", raw[:8])
        header = json.loads(raw[8:8 + length])
    except (struct.error, ValueError, RecursionError):
        return None
    ok = isinstance(header, dict) and all(isinstance(v, dict) and "data_offsets" in v
                                          for k, v in header.items() if k != "__metadata__")
    return (header, raw[8 + length:]) if ok and len(header) > 1 else None


def _write_weights(path: Path, header: dict, data: bytes) -> None:
    encoded = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(encoded)) + encoded + data)


def weights_header(rng, hf: Path, secret: Path) -> str:
    if _header(hf / WEIGHTS) is None:
        return "weights header (no plain weights file)"
    header, data = _header(hf / WEIGHTS)
    name = rng.choice(sorted(k for k in header if k != "__metadata__"))
    entry, edit = header[name], rng.choice(["dtype", "shape", "offsets", "drop", "rename", "copy", "metadata"])
    if edit == "dtype":
        entry["dtype"] = rng.choice(["F16", "BF16", "F64", "I64", "I32", "BOOL", "U8", "F8_E4M3", "XX", 3])
    elif edit == "shape":
        shape = list(entry["shape"])
        entry["shape"] = rng.choice([shape[::-1], [*shape, 1], shape[:-1], [0], [10**12], [-1], [], [2**63],
                                     [d * 2 for d in shape], "x"])
    elif edit == "offsets":
        start, end = entry["data_offsets"]
        entry["data_offsets"] = rng.choice([[end, start], [start, end + 4], [start + 4, end], [0, 2**63], [-8, end]])
    elif edit == "drop":
        del header[name]
    elif edit == "rename":
        header[name.replace("0", "7", 1) + rng.choice(["", ".x", "_"])] = header.pop(name)
    elif edit == "copy":
        header[name + ".copy"] = dict(entry)
    else:
        header["__metadata__"] = rng.choice([{"format": "pt"}, {"a": 1}, [], "x"])
    _write_weights(hf / WEIGHTS, header, data)
    return f"weights header {edit} {name}"


def weights_bytes(rng, hf: Path, secret: Path) -> str:
    if not (hf / WEIGHTS).is_file() or (hf / WEIGHTS).is_symlink():
        return "weights bytes (no plain weights file)"
    raw = bytearray((hf / WEIGHTS).read_bytes())
    edit = rng.choice(["truncate", "flip", "length", "extend"])
    if edit == "truncate":
        raw = raw[:rng.randrange(len(raw))]
    elif edit == "flip":
        raw[rng.randrange(len(raw))] ^= 1 << rng.randrange(8)
    elif edit == "length":
        raw[:8] = struct.pack("<Q", rng.choice([0, 1, 2**32, 2**63, len(raw)]))
    else:
        raw += rng.randbytes(64)
    (hf / WEIGHTS).write_bytes(bytes(raw))
    return f"weights bytes {edit}"


def shards(rng, hf: Path, secret: Path) -> str:
    """Split the weights into two shards with an index; then, maybe, spoil the index or a shard."""
    if _header(hf / WEIGHTS) is None:
        return "shards (no plain weights file)"
    header, data = _header(hf / WEIGHTS)
    names = sorted(k for k in header if k != "__metadata__")
    halves = {"model-00001-of-00002.safetensors": names[::2], "model-00002-of-00002.safetensors": names[1::2]}
    weight_map = {}
    for shard, members in halves.items():
        part, chunks, offset = {}, [], 0
        for name in members:
            start, end = header[name]["data_offsets"]
            part[name] = {**header[name], "data_offsets": [offset, offset + end - start]}
            chunks.append(data[start:end])
            offset += end - start
            weight_map[name] = shard
        _write_weights(hf / shard, part, b"".join(chunks))
    (hf / WEIGHTS).unlink()
    spoil = rng.choice(["none", "up", "absolute", "subdir", "missing", "link", "map", "wrong", "twice"])
    if spoil in ("up", "absolute", "subdir"):
        weight_map[names[0]] = {"up": "../secret.txt", "absolute": str(secret), "subdir": "a/b.safetensors"}[spoil]
    elif spoil == "missing":
        (hf / "model-00002-of-00002.safetensors").unlink()
    elif spoil == "link":
        (hf / "model-00002-of-00002.safetensors").unlink()
        (hf / "model-00002-of-00002.safetensors").symlink_to(secret)
    elif spoil == "wrong":
        weight_map[names[0]] = "model-00002-of-00002.safetensors"
    elif spoil == "twice":
        shutil.copy(hf / "model-00001-of-00002.safetensors", hf / "model-00002-of-00002.safetensors")
    index = {"metadata": {}, "weight_map": weight_map if spoil != "map" else rng.choice([[], {}, "x", None])}
    _replace(hf / INDEX)  # an earlier mutation may have made it a FIFO, which a write would block on
    (hf / INDEX).write_text(json.dumps(index))
    return f"shards {spoil}"


def _replace(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif os.path.lexists(path):
        path.unlink()


def link(rng, hf: Path, secret: Path) -> str:
    name = rng.choice([*CARRIED, WEIGHTS, "tokenizer.json", "merges.txt", "vocab.json"])
    target = rng.choice(LINK_TARGETS)
    _replace(hf / name)
    if target == "secret":
        (hf / name).symlink_to(secret)
    elif target == "chain":
        (hf / "hop").symlink_to("../secret.txt")
        (hf / name).symlink_to("hop")
    elif not (target == "config.json" and name == "config.json"):
        (hf / name).symlink_to(target)
    return f"link {name} -> {target}"


def special(rng, hf: Path, secret: Path) -> str:
    name, kind = rng.choice([*CARRIED, WEIGHTS, INDEX]), rng.choice(["fifo", "directory", "huge"])
    _replace(hf / name)
    if kind == "fifo":
        os.mkfifo(hf / name)
    elif kind == "directory":
        (hf / name).mkdir()
        (hf / name / "secret.txt").symlink_to(secret)
    else:
        with open(hf / name, "wb") as handle:
            handle.truncate(CARRIED_LIMIT + 1)  # sparse: no disk, and never to be read
    return f"special {name} {kind}"


def tokenizer_files(rng, hf: Path, secret: Path) -> str:
    name = rng.choice([n for n in CARRIED if n != "config.json"])
    _replace(hf / name)
    (hf / name).write_bytes(rng.choice([b"", b"{}", b"\x00\xff" * 100, json.dumps({"model": {}}).encode()]))
    return f"carried {name}"


def pickle_weights(rng, hf: Path, secret: Path) -> str:
    import torch

    if (hf / WEIGHTS).is_file() and not (hf / WEIGHTS).is_symlink():
        (hf / WEIGHTS).unlink()
        torch.save({"x": torch.zeros(2)}, hf / "pytorch_model.bin")
    return "pickle instead of safetensors"


MUTATIONS = (config_field, config_field, config_field, config_delete, config_bytes, weights_header, weights_header,
             weights_bytes, shards, link, link, special, tokenizer_files, pickle_weights)


def snapshot_of(rng, case: Path, hf: Path, secret: Path) -> tuple[Path, str]:
    """The directory moved into a Hugging Face cache layout (maybe with blobs/ linking out of it)."""
    repo = case / "models--org--tiny"
    blobs, snapshot = repo / "blobs", repo / "snapshots" / "abc123"
    blobs.mkdir(parents=True)
    snapshot.mkdir(parents=True)
    for number, path in enumerate(sorted(hf.iterdir())):
        if path.is_file() and not path.is_symlink():
            path.rename(blobs / f"blob{number}")
            (snapshot / path.name).symlink_to(f"../../blobs/blob{number}")
        else:
            path.rename(snapshot / path.name)
    what = "snapshot"
    if rng.random() < 0.3:
        blobs.rename(case / "elsewhere")
        blobs.symlink_to(case / "elsewhere")
        what = "snapshot, blobs/ linked out"
    return snapshot, what


# ---------------------------------------------------------------- one case


def run_case(seed: int, number: int, scratch: Path, checkpoint: Path, through_cli: bool, report: dict) -> None:
    rng = random.Random(f"{seed}:{number}")
    family, case = rng.choice(FAMILIES), scratch / f"case{number}"
    hf = write(pristine(family, scratch / "pristine"), case / "hf")
    secret = plant_canary(case)
    with hang_guard(HANG_GUARD_S):  # a mutation that blocks (writing into a FIFO) is the fuzz's own bug: fail
        what = [family] + [mutation(rng, hf, secret) for mutation in rng.sample(MUTATIONS, rng.choice([1, 1, 2, 3]))]
    if rng.random() < 0.1:
        hf, layout = snapshot_of(rng, case, hf, secret)
        what.append(layout)
    label = f"seed {seed} case {number}: " + "; ".join(what)
    peak = _max_rss()
    outcome = _library(hf, label, report)
    if through_cli:
        _command_line(hf, checkpoint, label, report)
    if _max_rss() > peak + GROWTH_NOTED:  # the cases that raised the peak, so a memory failure names its case
        report["peak_cases"].append(f"{label}: peak {_max_rss() / 2**20:.0f} MiB")
    report["outcomes"][outcome] += 1
    shutil.rmtree(case)


def _library(hf: Path, label: str, report: dict) -> str:
    try:
        with hang_guard(HANG_GUARD_S):
            model = import_hf(hf, registry=registry())
    except BlockspecError as error:
        if CANARY.decode() in str(error):
            report["secrets"].append(f"{label}: in the message")
        return "refused"
    except BaseException as error:  # the point of the fuzz: anything else is an internal error, reported
        report["internal"].append(f"{label}: {type(error).__name__}: {str(error)[:200]}")
        return "internal"
    if any(CANARY in data for data in model.carried.values()):
        report["secrets"].append(f"{label}: in model.carried")
    return "imported"


def _command_line(hf: Path, checkpoint: Path, label: str, report: dict) -> None:
    """import-hf --force over a good checkpoint: exit 0 or 2; refused: one line each, the checkpoint kept."""
    before = tree(checkpoint)
    with hang_guard(HANG_GUARD_S):
        code, lines = cli("import-hf", hf, "--out", checkpoint, "--force")
    report["cli"][str(code)] += 1
    if code not in (0, 2) or any(not line.startswith("blockspec: error: ") for line in lines) or \
            (code == 2 and not lines):
        report["internal"].append(f"{label}: exit {code}: {lines[:3]}")
    if any(CANARY.decode() in line for line in lines) or holds_canary(checkpoint):
        report["secrets"].append(f"{label}: through the command line")
    if code != 0 and tree(checkpoint) != before:
        report["changed"].append(f"{label}: the good checkpoint changed")
    if tree(checkpoint) != before:  # replaced by a successful import: the next case starts from the good one
        shutil.rmtree(checkpoint)
        write({name: data for name, data in before.items() if isinstance(data, bytes) and "/" not in name},
              checkpoint)
        write({name.split("/", 1)[1]: data for name, data in before.items()
               if isinstance(data, bytes) and "/" in name}, checkpoint / "hf")
    leftovers = sorted(p.name for p in checkpoint.parent.iterdir() if p.name not in ("ck", "pristine")
                       and not p.name.startswith("case"))
    if leftovers:
        report["changed"].append(f"{label}: left beside the output: {leftovers}")


def _max_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


def fuzz(cases: int, seed: int, cli_every: int) -> dict:
    report = {"cases": cases, "seed": seed, "outcomes": Counter(), "cli": Counter(), "internal": [], "secrets": [],
              "changed": [], "peak_cases": []}
    with tempfile.TemporaryDirectory(prefix="hostile-fuzz-") as root:
        scratch = Path(root)
        good = write(pristine("gpt2", scratch / "pristine"), scratch / "good")
        code, lines = cli("import-hf", good, "--out", scratch / "ck")
        assert code == 0, lines
        shutil.rmtree(good)
        for number in range(cases):
            run_case(seed, number, scratch, scratch / "ck", number % cli_every == 0, report)
    report["max_rss_bytes"] = _max_rss()
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.faults.hostile_fuzz")
    parser.add_argument("--cases", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cli-every", type=int, default=10)
    args = parser.parse_args(argv)
    print(json.dumps(fuzz(args.cases, args.seed, args.cli_every)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
