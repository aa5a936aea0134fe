"""`blockspec trace`: follow one input through a model and name every stage's shape and maker."""

from __future__ import annotations

import argparse
import fnmatch
from collections.abc import Sequence
from pathlib import Path

from attrs import frozen

from blockspec.errors import BlockspecError
from blockspec.train.tokenizer import CharTokenizer, TokenizerError, parse_ids, tokenizer_for
from blockspec.cli.common import (UsageError, add_device_argument, add_json_argument, add_plot_argument, seed_int,
                                  check_plot_file, emit_json, flag_names, non_negative_int, print_table,
                                  registry_with_warnings, resolve_device)

TOP_K = 5
CHAPTER = ("SECTION: 7.1-7.6 are the sections of chapter 7, \"Transformer Architecture\", which follows one token "
           "through a transformer: the chapter behind blockspec (docs/chapter-claims.md)")
FLAGS = {"ids": "--ids", "token_ids": "token ids with --ids", "text": "--text"}
# trace and explore have no --allow-pickle: a pickled Hugging Face model goes through import-hf, which has
PICKLE = {"allow_pickle": "import it with `blockspec import-hf DIR --allow-pickle --out CKPT` (torch.load, weights_only) "
          "and pass CKPT as SPEC"}


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("trace", help="follow one input through the model, stage by stage",
                                   description="Follow one input through the model, stage by stage: each stage's "
                                               "shape, operation, component and chapter section.",
                                   epilog=CHAPTER + ".")
    add_model_arguments(parser)
    parser.add_argument("--stage", metavar="PATTERN",
                        help="only stages whose name matches (fnmatch, e.g. 'blocks.*.attn.weights'), with values")
    add_json_argument(parser)
    add_plot_argument(parser, "write the stage overview to FILE, and each other picture next to it as "
                              "STEM-NAME.SUFFIX (attention per block, positional encoding)")
    parser.add_argument("--top", type=non_negative_int, default=TOP_K, metavar="K",
                        help=f"next-token candidates to list (default {TOP_K})")
    parser.set_defaults(run=run)


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """SPEC, --weights, --seed, --device and the input; shared with `blockspec explore`."""
    parser.add_argument("spec", metavar="SPEC", help="TOML spec file, checkpoint or Hugging Face directory")
    parser.add_argument("--weights", metavar="FILE", help="safetensors weights, or a blockspec checkpoint "
                        "directory of the same model; default: random, from --seed")
    parser.add_argument("--seed", type=seed_int, default=0, metavar="S", help="seed of the random weights (default 0)")
    add_device_argument(parser)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--text", help="input text (characters for a 65-token vocabulary, else UTF-8 bytes)")
    source.add_argument("--ids", help="input token ids, comma-separated: 1,2,3")


@frozen(kw_only=True)
class Prepared:
    """A model ready to trace, its input, and how both were made (for the report)."""

    model: object
    ids: list[int]
    labels: list[str]  # one printable label per token
    tokenizer: object | None
    weights: str  # "random (seed 0)" or the file


def prepare(args: argparse.Namespace) -> Prepared:
    from blockspec.assembly.assemble import build, build_unfilled
    from blockspec.interop.sources import load_model, load_spec_or_checkpoint, source_kind
    from blockspec.checkpoint.weights_file import load_weights

    device = resolve_device(args.device)
    registry = registry_with_warnings()
    spec = load_spec_or_checkpoint(args.spec, registry)  # a spec file, a checkpoint or a Hugging Face directory
    with flag_names(FLAGS):
        ids, tokenizer = _input_ids(args, spec.model.vocab_size)  # before the build: bad input fails fast
    has_weights = source_kind(args.spec) != "spec"
    if args.weights and source_kind_of_weights(args.weights) == "checkpoint":
        model = _checkpoint_weights(args.weights, spec, registry)
    elif args.weights:
        model = build_unfilled(spec, registry=registry)  # the file fills every tensor, or load_weights refuses it
        _refuse_hugging_face_file(args.weights, model)
        load_weights(model, args.weights)
    else:
        with flag_names(PICKLE):
            model = load_model(args.spec, registry) if has_weights else build(spec, seed=args.seed)
    model.to(device).eval()
    labels = [label_of(tokenizer, i) for i in ids]
    weights = args.weights or (str(args.spec) if has_weights else
                               f"random (seed {args.seed}; pass --weights FILE for trained ones)")
    return Prepared(model=model, ids=ids, labels=labels, tokenizer=tokenizer, weights=weights)


def source_kind_of_weights(path: str) -> str:
    """'checkpoint' for a blockspec checkpoint directory, 'file' for anything else (load_weights judges it)."""
    from blockspec.interop.sources import MANIFEST

    return "checkpoint" if Path(path).is_dir() and (Path(path) / MANIFEST).is_file() else "file"


def _checkpoint_weights(path: str, spec, registry):
    """``--weights CKPT``: what a user who trained CKPT from SPEC means; its weights through the verified
    loader (manifest sizes and digests), accepted when CKPT's model is SPEC's (the name aside)."""
    from blockspec.checkpoint.directory import load
    from blockspec.spec.convert import spec_to_dict

    model = load(path, registry=registry)

    def shape(of) -> dict:
        document = spec_to_dict(of)
        document.get("model", {}).pop("name", None)
        return document

    if shape(model.spec) != shape(spec):
        raise UsageError(f"--weights: {path} is a checkpoint of {model.spec.model.name!r}, a different model "
                         f"than SPEC's {spec.model.name!r}; trace the checkpoint itself: blockspec trace {path} ...")
    return model


def _refuse_hugging_face_file(path: str, model) -> None:
    """A Hugging Face weights file names its tensors its own way: one line that says so, not one per tensor."""
    import re

    from blockspec.checkpoint.safetensors_file import read_header
    from blockspec.errors import CheckpointError
    from blockspec.interop.families import FAMILIES

    try:
        names = list(read_header(Path(path)).entries) if Path(path).is_file() else []
    except CheckpointError:
        return  # not readable: load_weights says how
    if not names or set(names) & set(model.state_dict()):
        return
    if any(re.match(family.layer_index, family.normalize_name(name)) for family in FAMILIES for name in names):
        raise UsageError(f"--weights: {path} is a Hugging Face weights file (tensor names like {sorted(names)[0]!r}); "
                         "pass its folder, with its config.json, as SPEC, or turn it into a checkpoint with "
                         "blockspec import-hf FOLDER --out CKPT")


def _input_ids(args: argparse.Namespace, vocab_size: int):
    if args.ids is not None:
        tokenizer = CharTokenizer.default() if vocab_size == CharTokenizer.default().vocab_size else None
        return parse_ids(args.ids, vocab_size), tokenizer
    if not args.text:
        raise TokenizerError("--text: expected at least one character, found an empty text")
    tokenizer = tokenizer_for(vocab_size)
    try:
        return tokenizer.encode(args.text), tokenizer
    except TokenizerError as error:
        raise TokenizerError(f"--text: {error}, or pass token ids with --ids") from None


def label_of(tokenizer, token_id: int) -> str:
    """A printable spelling of one token id (the id itself without a tokenizer)."""
    if tokenizer is None:
        return str(token_id)
    text = tokenizer.decode([token_id])
    if not text:
        return f"<{token_id}>"  # outside what the tokenizer can spell (a byte tokenizer's ids >= 256)
    return text if text.isprintable() else repr(text)[1:-1]


def run(args: argparse.Namespace) -> int:
    from blockspec.inspect.trace import trace

    plot = check_plot_file(args.plot)
    prepared = prepare(args)
    result = trace(prepared.model, input_tensor(prepared))
    stages = [s for s in result.stages if args.stage is None or fnmatch.fnmatchcase(s.name, args.stage)]
    if args.stage is not None and not stages:
        raise BlockspecError(f"--stage: no stage matches {args.stage!r}; stages are named like "
                             f"{', '.join(result.names()[:4])}, blocks.0.attn.weights, ...")
    plots = _plots(plot, result, prepared)
    top = next_tokens(result, prepared, args.top)
    if args.json:
        emit_json(_as_json(prepared, stages, top, plots, with_values=args.stage is not None))
    else:
        _print(prepared, stages, top, plots, with_values=args.stage is not None)
    return 0


def input_tensor(prepared: Prepared):
    """The input as a (1, N) tensor on the model's device."""
    import torch

    return torch.tensor([prepared.ids], device=prepared.model.embedding.weight.device)


class _PlotFiles:
    """Stands in for the plots' output folder: ``out / "stages.png"`` is FILE itself, and any other
    picture ``out / "NAME.png"`` is FILE's sibling STEM-NAME.SUFFIX, so FILE's suffix picks every format."""

    def __init__(self, target: Path) -> None:
        self.target = target

    def __truediv__(self, name: str) -> Path:
        picture = name.removesuffix(".png")
        if picture == "stages":
            return self.target
        return self.target.with_name(f"{self.target.stem}-{picture}{self.target.suffix}")


def _plots(plot: Path | None, result, prepared: Prepared) -> list[str]:
    """The stage overview in FILE, then one sibling per attention layer and the positional encoding."""
    if plot is None:
        return []
    from blockspec.inspect.plots import plot_attention, plot_overview, plot_positional
    from blockspec.train.plot import pyplot as load_pyplot

    pyplot = load_pyplot()
    out, model = _PlotFiles(plot), prepared.model
    try:
        written = [plot_overview(pyplot, result, out)]
        written += [plot_attention(pyplot, name, weights[0], prepared.labels, out)
                    for name, weights in result.select("*.attn.weights").items()]
        if model.positional.adds or model.positional.rotates:
            written.append(plot_positional(pyplot, model, out))
    except OSError as error:
        raise UsageError(f"--plot: {error.filename or plot}: cannot write the picture: {error.strerror}") from None
    return [str(p) for p in written]


def next_tokens(result, prepared: Prepared, k: int) -> list[dict]:
    """The k most likely next tokens after the last input token."""
    if "logits" not in result.names():
        return []
    probs = result["probs"].tensor[0, -1]  # (|V|,)
    values, indices = probs.topk(min(k, probs.shape[-1]))
    return [{"id": int(i), "token": label_of(prepared.tokenizer, int(i)), "p": float(v)}
            for v, i in zip(values, indices)]


def _stage_json(stage, with_values: bool) -> dict:
    record = {"name": stage.name, "shape": list(stage.shape), "op": stage.op, "component": stage.component,
              "distribution": stage.distribution, "section": stage.section}
    if with_values:
        record["values"] = stage.tensor[0].tolist()
    return record


def _as_json(prepared: Prepared, stages, top, plots, *, with_values: bool) -> dict:
    tokenizer = prepared.tokenizer.describe() if prepared.tokenizer else None
    return {
        "model": prepared.model.spec.model.name,
        "weights": prepared.weights,
        "input": {"ids": prepared.ids, "tokens": prepared.labels, "tokenizer": tokenizer},
        "stages": [_stage_json(s, with_values) for s in stages],
        "next_token": top,
        "plots": plots,
    }


def _print(prepared: Prepared, stages, top, plots, *, with_values: bool) -> None:
    n_tokens = len(prepared.ids)
    print(f"{prepared.model.spec.model.name}: weights {prepared.weights}")
    how = prepared.tokenizer.describe() if prepared.tokenizer else "token ids"
    print(f"input: {''.join(prepared.labels)!r} -> ids {prepared.ids}  ({how}; N = {n_tokens}, batch 1 omitted)\n")
    rows = [(s.name, " x ".join(map(str, s.shape)), s.op, _provider(s), s.section) for s in stages]
    print_table(("STAGE", "SHAPE", "OP", "COMPONENT", "SECTION"), rows)
    print(f"\n{CHAPTER}")
    if with_values:
        _print_values(stages)
    if top:
        print(f"\nnext token after the last input token (top {len(top)}):")
        print_table(("TOKEN", "ID", "P"), [(f"'{t['token']}'", t["id"], f"{t['p']:.4f}") for t in top], right=(1, 2))
    for path in plots:
        print(f"wrote {path}")


def _provider(stage) -> str:
    if stage.component:
        return f"{stage.component} ({stage.distribution})"
    return f"{stage.distribution} core" if stage.distribution else "?"


def _print_values(stages: Sequence) -> None:
    import torch

    torch.set_printoptions(precision=4, sci_mode=False)  # a CLI process: the global setting is ours
    for stage in stages:
        print(f"\n{stage.name}  [{', '.join(map(str, stage.shape))}]")
        print(stage.tensor[0].cpu())
