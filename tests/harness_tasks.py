"""Local lm-evaluation-harness tasks for the harness tests: JSONL documents and their task YAML, offline.

``dataset_path: json`` with ``dataset_kwargs: data_files`` reads the documents with the ``datasets``
library's packaged JSON builder, so no network is needed (HF_DATASETS_OFFLINE=1 makes sure of it).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from .corpus import small_play
from .specs import spec_text

MULTIPLE_CHOICE, ROLLING = "blockspec_toy_choice", "blockspec_toy_rolling"
WORDS = ["king", "lord", "sweet", "love", "night", "good", "death", "heaven", "crown", "sword"]


def choice_documents(count: int = 30) -> list[dict]:
    """Fill-the-word questions; every fifth has no question, so its choices are scored after an empty context."""
    rng = random.Random(1)
    lines = [line for line in small_play(200).splitlines() if len(line) > 12]
    documents = []
    for number in range(count):
        question = "" if number % 5 == 0 else lines[number].strip()
        choices = rng.sample(WORDS, 4)
        documents.append({"question": question, "choices": choices, "answer": rng.randrange(4)})
    return documents


def rolling_documents(count: int = 24) -> list[dict]:
    """Passages of the play, some longer than a 64-token context (several rolling windows)."""
    text = small_play(400, seed=2).split("\n\n")
    return [{"text": "\n\n".join(text[i * 3:(i + 1) * 3 + (i % 4)])} for i in range(count)]


def write_tasks(folder: Path) -> Path:
    """Both tasks' YAML and JSONL in ``folder`` (the ``--include-path``)."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, documents in ((MULTIPLE_CHOICE, choice_documents()), (ROLLING, rolling_documents())):
        (folder / f"{name}.jsonl").write_text("".join(json.dumps(d) + "\n" for d in documents))
    (folder / f"{MULTIPLE_CHOICE}.yaml").write_text(_yaml(
        MULTIPLE_CHOICE, folder, "multiple_choice",
        'doc_to_text: "{{question}}"\ndoc_to_choice: "{{choices}}"\ndoc_to_target: answer\n',
        ["acc", "acc_norm"]))
    (folder / f"{ROLLING}.yaml").write_text(_yaml(
        ROLLING, folder, "loglikelihood_rolling", 'doc_to_text: ""\ndoc_to_target: "{{text}}"\n',
        ["word_perplexity", "byte_perplexity", "bits_per_byte"]))
    return folder


def _yaml(name: str, folder: Path, output_type: str, documents: str, metrics: list[str]) -> str:
    metric_list = "".join(f"  - metric: {metric}\n" for metric in metrics)
    return (f"task: {name}\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {folder / name}.jsonl\n"
            f"test_split: test\noutput_type: {output_type}\n{documents}metric_list:\n{metric_list}")


def tiny(positional: str = "learned") -> str:
    """The harness tests' GPT-2-shaped spec (or another positional encoding in the same shape)."""
    return spec_text(name=f"harness-{positional}", vocab_size=300, context_length=64, d_model=32, n_layers=2,
                     n_heads=2, d_ff=64, positional=positional)


def write_sources(root: Path, registry) -> Path:
    """A GPT-2-shaped checkpoint and an ALiBi one (weights perturbed, so choices differ), the first exported.

    Built once per session (conftest's ``sources``): the parity and CLI tests only read it.
    """
    import torch

    import blockspec
    from blockspec.cli import main

    from .hf_parity import perturbed  # imports transformers: only when the harness tests run

    (root / "play.txt").write_text(small_play(300))
    assert main(["tokenizer", "train", str(root / "play.txt"), "--vocab-size", "300", "--out", str(root / "tok")]) == 0
    tokenizer = (root / "tok" / "tokenizer.json").read_bytes()
    for positional in ("learned", "alibi"):
        (root / f"{positional}.toml").write_text(tiny(positional))
        model = perturbed(blockspec.build(blockspec.load_spec(root / f"{positional}.toml", registry),
                                          registry=registry, seed=0), seed=1)
        with torch.no_grad():
            for parameter in model.parameters():
                parameter.mul_(0.5)  # std 0.1: logits spread, none saturated
        blockspec.save(model, root / positional, extra_files={"tokenizer.json": tokenizer})
    assert main(["export-hf", str(root / "learned"), "--out", str(root / "export")]) == 0
    write_tasks(root / "tasks")
    return root
