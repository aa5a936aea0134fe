"""Local lm-evaluation-harness tasks for the harness tests: JSONL documents and their task YAML, offline.

``dataset_path: json`` with ``dataset_kwargs: data_files`` reads the documents with the ``datasets``
library's packaged JSON builder, so no network is needed (HF_DATASETS_OFFLINE=1 makes sure of it).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from .corpus import small_play

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
