"""Hostile checkpoints (reliability, part 4): damaged or forged files fail as CheckpointError only.

Each load is fuzzed from a pristine tiny checkpoint: truncated files, flipped bits, edited
safetensors headers and manifests (re-signed, as a forger would), and malicious pickles.
The properties: the only exception is CheckpointError, each of its lines names the file;
no load outlives a hang guard; every flipped bit in the spec or the weights is caught by the
manifest's sha256; a forgery that still loads gives exactly the original model (an edit
the format ignores); a pickle that would write a marker file is never unpickled.
Counts and the slowest load are printed at the end of the module (run with -rA or -s).
"""

from __future__ import annotations

import contextlib
import json
import pickle
import signal
import struct
import tempfile
import time
import warnings
from collections import Counter
from pathlib import Path

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import blockspec
from blockspec.checkpoint.directory import load, save
from blockspec.cli import main
from blockspec.errors import CheckpointError
from blockspec.interop import export_hf, import_hf
from blockspec.checkpoint.manifest import Manifest, read_manifest, record_files

from .weights_helpers import gpt2_spec, randomized

pytestmark = [pytest.mark.filterwarnings("ignore:Generating overly large repr"),
              pytest.mark.filterwarnings("ignore:Detected pickle protocol")]  # the hostile pickles' own
HANG_GUARD_S = 30  # a hang detector, not a speed test: a tiny checkpoint loads in milliseconds
DATA_FILES = ("spec.toml", "model.safetensors", "tokenizer.json")
FILES = (*DATA_FILES, "manifest.json")
STATS: dict[str, Counter] = {}
SLOWEST: dict[str, float] = {}


@pytest.fixture(scope="module", autouse=True)
def report(request):
    yield
    plugins = request.config.pluginmanager
    reporter, capture = plugins.get_plugin("terminalreporter"), plugins.get_plugin("capturemanager")
    if reporter is None or capture is None or not STATS:
        return
    with capture.global_and_fixture_disabled():
        reporter.write_line("")
        for name, counts in sorted(STATS.items()):
            reporter.write_line(f"hostile checkpoints: {name}: {sum(counts.values())} loads, {dict(counts)}, "
                                f"slowest {SLOWEST[name] * 1000:.1f} ms")


@pytest.fixture(scope="module")
def pristine(registry, tmp_path_factory) -> tuple[dict[str, bytes], torch.nn.Module]:
    model = randomized(blockspec.build(gpt2_spec(registry), registry=registry, seed=0))
    path = save(model, tmp_path_factory.mktemp("pristine") / "ckpt", extra={"note": "fuzz"},
                extra_files={"tokenizer.json": b'{"model": "bpe"}'})
    return {name: (path / name).read_bytes() for name in FILES}, model


@contextlib.contextmanager
def hang_guard(seconds: float):
    def on_alarm(*_):
        raise TimeoutError(f"a load ran past the {seconds}s hang guard")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def same_weights(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def identical(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    return same_weights(a, b) and a.spec == b.spec


def attempt(kind: str, files: dict[str, bytes], registry, original, *, resign: bool = False,
            same_spec: bool = True) -> str:
    """Load the given files as a checkpoint: 'CheckpointError: ...' (its lines checked) or 'loaded'.

    A load that succeeds must give the original weights, and the original spec unless
    ``same_spec`` is off (a forger who re-signs spec.toml may describe another valid model).
    """
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp) / "ckpt"
        directory.mkdir()
        for name, data in files.items():
            (directory / name).write_bytes(data)
        if resign:
            resign_files(directory)
        start = time.perf_counter()
        try:
            with hang_guard(HANG_GUARD_S), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                model = load(directory, registry=registry)
            result = "loaded"
        except CheckpointError as error:
            lines = str(error).splitlines()
            assert lines and all(str(directory) in line or line.startswith("  ") for line in lines), lines
            result, model = f"CheckpointError: {error}", None
        SLOWEST[kind] = max(SLOWEST.get(kind, 0.0), time.perf_counter() - start)
    STATS.setdefault(kind, Counter())["error" if model is None else "loaded"] += 1
    if model is not None:
        assert same_weights(model, original), f"{kind}: a forged checkpoint loaded with other weights"
        assert model.spec == original.spec or not same_spec, f"{kind}: a forged checkpoint changed the spec"
    return result


def resign_files(directory: Path) -> None:
    """Recompute the file digests a forger can recompute, keeping the recorded tensor digests."""
    try:
        old = read_manifest(directory)
    except CheckpointError:
        return
    present = [n for n in old.files if (directory / n).is_file()]
    manifest = Manifest(files=record_files(directory, present), tensors=old.tensors, extra=old.extra)
    (directory / "manifest.json").write_text(manifest.to_json())


# ---------------------------------------------------------------- damage: truncation and bit flips


@given(data=st.data(), name=st.sampled_from(FILES))
def test_truncated_files(pristine, registry, data, name):
    files, original = pristine
    cut = data.draw(st.integers(0, len(files[name]) - 1), label="kept bytes")
    outcome = attempt("truncated", {**files, name: files[name][:cut]}, registry, original)
    if name in DATA_FILES:
        assert outcome.startswith("CheckpointError")


@given(data=st.data(), name=st.sampled_from(DATA_FILES[:2]))
def test_every_bit_flip_in_spec_or_weights_is_caught_by_sha256(pristine, registry, data, name):
    files, original = pristine
    index = data.draw(st.integers(0, len(files[name]) - 1), label="byte")
    bit = data.draw(st.integers(0, 7), label="bit")
    damaged = bytearray(files[name])
    damaged[index] ^= 1 << bit
    outcome = attempt("bit flip (data)", {**files, name: bytes(damaged)}, registry, original)
    assert outcome.startswith("CheckpointError") and f"{name}: sha256 differs from the manifest" in outcome


def test_a_flipped_weight_byte_names_its_tensor(pristine, registry):
    files, original = pristine
    damaged = bytearray(files["model.safetensors"])
    damaged[-3] ^= 0x10  # inside the last tensor's data
    outcome = attempt("bit flip (data)", {**files, "model.safetensors": bytes(damaged)}, registry, original)
    assert "bytes differ from the manifest's sha256" in outcome and outcome.count("tensor '") == 1
    assert "model.safetensors: sha256 differs from the manifest" in outcome


@given(data=st.data())
def test_bit_flips_in_the_manifest(pristine, registry, data):
    files, original = pristine
    index = data.draw(st.integers(0, len(files["manifest.json"]) - 1), label="byte")
    damaged = bytearray(files["manifest.json"])
    damaged[index] ^= 1 << data.draw(st.integers(0, 7), label="bit")
    attempt("bit flip (manifest)", {**files, "manifest.json": bytes(damaged)}, registry, original)


# ---------------------------------------------------------------- forgery: edited headers and manifests

JSON_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=False),
                         st.text(max_size=12), st.sampled_from(["F32", "BF16", "I64", "F8_E4M3", "Q4", ""]))
JSON_VALUES = st.recursive(JSON_SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                                 st.dictionaries(st.text(max_size=8), inner,
                                                                                 max_size=4)), max_leaves=12)


def split_safetensors(blob: bytes) -> tuple[dict, bytes]:
    (length,) = struct.unpack("<Q", blob[:8])
    return json.loads(blob[8 : 8 + length]), blob[8 + length :]


def join_safetensors(header: object, data: bytes) -> bytes:
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + data


@st.composite
def edited_headers(draw, blob: bytes) -> bytes:
    header, data = split_safetensors(blob)
    names = sorted(n for n in header if n != "__metadata__")
    name = draw(st.sampled_from(names))
    edit = draw(st.sampled_from(["field", "drop", "add", "rename", "replace", "prefix", "nest", "swap"]))
    if edit == "field":
        header[name][draw(st.sampled_from(["dtype", "shape", "data_offsets"]))] = draw(JSON_VALUES)
    elif edit == "drop":
        del header[name]
    elif edit == "add":
        header[draw(st.text(max_size=10))] = draw(JSON_VALUES)
    elif edit == "rename":
        header[draw(st.text(max_size=30))] = header.pop(name)
    elif edit == "replace":
        header = draw(JSON_VALUES)
    elif edit == "swap":
        other = draw(st.sampled_from(names))
        header[name]["data_offsets"], header[other]["data_offsets"] = (header[other]["data_offsets"],
                                                                       header[name]["data_offsets"])
    elif edit == "prefix":
        return struct.pack("<Q", draw(st.integers(0, 2**64 - 1))) + blob[8:]
    else:
        depth = draw(st.integers(1, 100_000))
        raw = ("[" * depth + "]" * depth).encode()
        return struct.pack("<Q", len(raw)) + raw + data
    return join_safetensors(header, data)


@given(data=st.data())
def test_edited_safetensors_headers_with_a_resigned_manifest(pristine, registry, data):
    files, original = pristine
    forged = data.draw(edited_headers(files["model.safetensors"]), label="weights")
    attempt("header edit (re-signed)", {**files, "model.safetensors": forged}, registry, original, resign=True)


HOSTILE_NAMES = ["../spec.toml", "/etc/passwd", "a/../../b", "x" * 300, "", ".", "..", "a/b/c", "sub/../x",
                 "C:\\evil", "spec.toml\x00", " spec.toml"]


@st.composite
def edited_manifests(draw, text: bytes) -> bytes:
    document = json.loads(text)
    edit = draw(st.sampled_from(["value", "drop", "name", "file", "replace"]))
    if edit == "value":
        section = draw(st.sampled_from(["format", "format_version", "files", "tensors", "extra"]))
        document[section] = draw(JSON_VALUES)
    elif edit == "drop":
        document.pop(draw(st.sampled_from(sorted(document))))
    elif edit == "name":
        files = document["files"]
        files[draw(st.sampled_from(HOSTILE_NAMES))] = files.pop(draw(st.sampled_from(sorted(files))))
    elif edit == "file":
        record = document["files"][draw(st.sampled_from(sorted(document["files"])))]
        record[draw(st.sampled_from(["sha256", "size"]))] = draw(JSON_VALUES)
    else:
        document = draw(JSON_VALUES)
    return json.dumps(document).encode()


@given(data=st.data())
def test_edited_manifests(pristine, registry, data):
    files, original = pristine
    forged = data.draw(edited_manifests(files["manifest.json"]), label="manifest")
    attempt("manifest edit", {**files, "manifest.json": forged}, registry, original)


@given(data=st.data())
def test_edited_specs_with_a_resigned_manifest(pristine, registry, data):
    files, original = pristine
    lines = files["spec.toml"].decode().splitlines()
    index = data.draw(st.integers(0, len(lines) - 1), label="line")
    lines[index] = data.draw(st.sampled_from(["", "n_layers = 1000000000", "d_model = 1000000000000",
                                              "vocab_size = -1", "[lock]", 'use = "nonexistent"', "x = [[[[[[",
                                              "tied = false", "n_heads = 3"]), label="replacement")
    forged = "\n".join(lines).encode()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        attempt("spec edit (re-signed)", {**files, "spec.toml": forged}, registry, original, resign=True,
                same_spec=False)


def test_a_billion_layer_spec_is_refused_before_building(pristine, registry):
    files, original = pristine
    forged = files["spec.toml"].replace(b"n_layers = 2", b"n_layers = 1000000000")
    outcome = attempt("spec edit (re-signed)", {**files, "spec.toml": forged}, registry, original, resign=True)
    assert "$.model.n_layers: expected a number in [0, 1024], found 1000000000" in outcome
    forged = files["spec.toml"].replace(b"n_layers = 2", b"n_layers = 1000")  # within the schema's bound
    outcome = attempt("spec edit (re-signed)", {**files, "spec.toml": forged}, registry, original, resign=True)
    assert "n_layers = 1000, but" in outcome and "holds the weights of 2 layers" in outcome


# ---------------------------------------------------------------- Hugging Face directories (no manifest)


@pytest.fixture(scope="module")
def hf_files(registry, tmp_path_factory) -> dict[str, bytes]:
    model = randomized(blockspec.build(gpt2_spec(registry), registry=registry, seed=1))
    path = export_hf(model, tmp_path_factory.mktemp("hf") / "model")
    return {name: (path / name).read_bytes() for name in ("config.json", "model.safetensors")}


def import_attempt(kind: str, files: dict[str, bytes], registry) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        for name, data in files.items():
            Path(tmp, name).write_bytes(data)
        start = time.perf_counter()
        try:
            with hang_guard(HANG_GUARD_S):
                import_hf(tmp, registry=registry)
            STATS.setdefault(kind, Counter())["loaded"] += 1
        except CheckpointError as error:
            assert str(error).strip()
            STATS.setdefault(kind, Counter())["error"] += 1
        SLOWEST[kind] = max(SLOWEST.get(kind, 0.0), time.perf_counter() - start)


@given(data=st.data())
def test_hostile_hugging_face_weights(hf_files, registry, data):
    blob = hf_files["model.safetensors"]
    how = data.draw(st.sampled_from(["truncate", "flip", "header"]))
    if how == "truncate":
        blob = blob[: data.draw(st.integers(0, len(blob) - 1))]
    elif how == "flip":
        damaged = bytearray(blob)
        damaged[data.draw(st.integers(0, len(blob) - 1))] ^= 1 << data.draw(st.integers(0, 7))
        blob = bytes(damaged)
    else:
        blob = data.draw(edited_headers(blob))
    import_attempt("hf weights", {**hf_files, "model.safetensors": blob}, registry)


@given(key=st.sampled_from(["n_embd", "n_layer", "n_head", "n_positions", "vocab_size", "n_inner",
                            "activation_function", "layer_norm_epsilon", "tie_word_embeddings", "architectures",
                            "model_type"]), value=JSON_VALUES)
def test_hostile_hugging_face_configs(hf_files, registry, key, value):
    config = {**json.loads(hf_files["config.json"]), key: value}
    import_attempt("hf config", {**hf_files, "config.json": json.dumps(config).encode()}, registry)


def test_a_billion_layer_config_is_refused_before_building(hf_files, registry, tmp_path):
    (tmp_path / "model.safetensors").write_bytes(hf_files["model.safetensors"])
    for n_layer, refusal in [(10**9, r"config\.json: \$\.n_layer: expected an integer from 0 to 1,024, found 1,000,000,000"),
                             (1000, "n_layers = 1000, but .* 2 layers")]:
        config = {**json.loads(hf_files["config.json"]), "n_layer": n_layer}
        (tmp_path / "config.json").write_text(json.dumps(config))
        with hang_guard(HANG_GUARD_S), pytest.raises(CheckpointError, match=refusal):
            import_hf(tmp_path, registry=registry)


# ---------------------------------------------------------------- pickles never run


class WritesMarker:
    """Unpickling this object writes a file: the stand-in for arbitrary code execution."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.write_text, (self.marker, "pwned"))


@pytest.fixture
def marker(tmp_path) -> Path:
    return tmp_path / "MARKER"


def hostile_pickles(directory: Path, marker: Path) -> list[bytes]:
    """The same payload as a plain pickle and in torch.save's zip format; proven live first."""
    payload = pickle.dumps({"transformer.wte.weight": WritesMarker(marker)})
    pickle.loads(payload)
    assert marker.read_text() == "pwned"  # the payload really runs when unpickled
    marker.unlink()
    torch.save({"transformer.wte.weight": WritesMarker(marker)}, directory / "zipped.pt")
    return [payload, (directory / "zipped.pt").read_bytes()]


@pytest.mark.parametrize("opt_in", [False, True])
def test_a_malicious_pickle_is_never_unpickled(hf_files, registry, tmp_path, marker, capsys, opt_in):
    for index, payload in enumerate(hostile_pickles(tmp_path, marker)):
        directory = tmp_path / f"hf{index}"
        directory.mkdir()
        (directory / "config.json").write_bytes(hf_files["config.json"])
        (directory / "pytorch_model.bin").write_bytes(payload)
        with pytest.raises(CheckpointError, match="weights_only" if opt_in else "is a pickle"):
            import_hf(directory, registry=registry, allow_pickle=opt_in)
        argv = ["import-hf", str(directory), "--out", str(tmp_path / "c")] + (["--allow-pickle"] if opt_in else [])
        assert main(argv) == 2 and "Traceback" not in capsys.readouterr().err
        assert not marker.exists()


def test_a_broken_safetensors_never_falls_back_to_a_pickle(hf_files, registry, tmp_path, marker):
    payload = hostile_pickles(tmp_path, marker)[1]
    (tmp_path / "config.json").write_bytes(hf_files["config.json"])
    (tmp_path / "model.safetensors").write_bytes(hf_files["model.safetensors"][:100])
    (tmp_path / "pytorch_model.bin").write_bytes(payload)
    for opt_in in (False, True):
        with pytest.raises(CheckpointError, match="model.safetensors"):
            import_hf(tmp_path, registry=registry, allow_pickle=opt_in)
    assert not marker.exists()


def test_a_pickle_beside_a_checkpoint_is_never_read(pristine, registry, tmp_path, marker):
    files, original = pristine
    (tmp_path / "ckpt").mkdir()
    for name, data in files.items():
        (tmp_path / "ckpt" / name).write_bytes(data)
    payload = hostile_pickles(tmp_path, marker)[0]
    for name in ("model.pt", "pytorch_model.bin", "optimizer.pt"):
        (tmp_path / "ckpt" / name).write_bytes(payload)
    assert identical(load(tmp_path / "ckpt", registry=registry), original)
    assert not marker.exists()
