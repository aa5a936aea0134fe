"""`blockspec export-peft`: a model's LoRA or DoRA adapters in PEFT's layout, for its base's `export-hf`."""

from __future__ import annotations

import argparse

from blockspec.interop.hf_layout import EXPORT, PEFT_EXPORT
from blockspec.outputs.targets import check_writable_target
from blockspec.cli.common import add_json_argument, emit_json, flag_names

FLAGS = {"overwrite": "--force"}


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("export-peft", help="export a model's adapters for Hugging Face PEFT")
    parser.add_argument("source", metavar="SOURCE", help="a checkpoint whose spec has [[adapters]] (lora or dora)")
    parser.add_argument("--out", required=True, metavar="DIR",
                        help="directory to write adapter_config.json and adapter_model.safetensors to")
    parser.add_argument("--base", metavar="HFDIR",
                        help="also write the base without its adapters as export-hf does, for "
                             "PeftModel.from_pretrained(base, DIR)")
    parser.add_argument("--force", action="store_true", help="replace DIR (and HFDIR) if each is such an export")
    add_json_argument(parser, "a JSON object (source, directory, modules, base)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    with flag_names(FLAGS):
        check_writable_target(args.out, kind=PEFT_EXPORT, overwrite=args.force, inputs=[args.source, args.base])
        if args.base is not None:
            check_writable_target(args.base, kind=EXPORT, overwrite=args.force, inputs=[args.source, args.out])
        return _export(args)


def _export(args: argparse.Namespace) -> int:
    from blockspec.assembly.merge import unload_adapters
    from blockspec.interop import export_hf
    from blockspec.interop.peft_export import export_peft, peft_modules
    from blockspec.cli.merge_cmd import open_adapted
    from blockspec.sources.hf_export_files import export_files

    source, model = open_adapted(args.source, doing="export", hint="export the plain model with blockspec export-hf")
    modules = [m.name for m in peft_modules(model)]  # refused here, before anything is written
    with flag_names(FLAGS):
        export_peft(model, args.out, overwrite=args.force)
        if args.base is not None:
            base = unload_adapters(model)
            export_hf(base, args.base, extra_files=export_files(source, base.carried), overwrite=args.force)
    if args.json:
        emit_json({"source": str(source.path), "directory": str(args.out), "modules": modules, "base": args.base})
        return 0
    also = f"; base: {args.base}" if args.base is not None else ""
    print(f"exported {len(modules)} adapted modules of {source.path} for PEFT -> {args.out}{also}")
    return 0
