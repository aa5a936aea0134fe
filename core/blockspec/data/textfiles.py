"""UTF-8 text files read in pieces of about 1 MiB, so any size of corpus fits in constant memory.

Torch-free: `blockspec tokenizer train` uses it without loading torch.
"""

from __future__ import annotations

import codecs
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

from blockspec.data.tokenizer import TokenizerError

CHUNK_BYTES = 1 << 20


class TextFileError(TokenizerError):
    """A text file is missing, empty, not UTF-8, or given twice."""


def check_text_files(paths: Sequence[str | Path]) -> int:
    """Refuse, before any work, a file given twice, or a missing, empty or non-UTF-8 file (one line each);
    returns the total bytes."""
    check_distinct(paths)
    total = 0
    for path in paths:
        for _ in chunks(path):
            pass
        total += Path(path).stat().st_size
    return total


def check_distinct(paths: Sequence[str | Path]) -> None:
    """Refuse one file given twice under any spelling (``./a.txt``, a link, a hard link): its text would count twice."""
    seen: dict[tuple[int, int], str | Path] = {}
    for path in paths:
        try:
            status = os.stat(path)
        except OSError:
            continue  # a missing file: reading it says so
        identity = (status.st_dev, status.st_ino)
        if identity in seen:
            raise TextFileError(f"{path}: is the same file as {seen[identity]}; give each file once")
        seen[identity] = path


def chunks(path: str | Path, size: int = CHUNK_BYTES, *, wanted: str = "UTF-8 text to train on") -> Iterator[str]:
    """The text of ``path`` in pieces of about ``size`` bytes that end at a line break where there is one;
    ``wanted`` is what an empty file's refusal says was expected."""
    decoder, carry, offset = codecs.getincrementaldecoder("utf-8")(), "", 0
    with _opened(path) as stream:
        while block := stream.read(size):
            text = carry + _decode(decoder, block, path, offset)
            offset += len(block)
            cut = text.rfind("\n") + 1 or (len(text) if len(text) >= size else 0)  # one huge line: cut anyway
            carry = text[cut:]
            if cut:
                yield text[:cut]
        tail = carry + _decode(decoder, b"", path, offset, final=True)
    if not offset:
        raise TextFileError(f"{path}: is empty; expected {wanted}")
    if tail:
        yield tail


def _opened(path: str | Path):
    target = Path(path)
    if target.is_dir():
        raise TextFileError(f"{path}: is a directory; expected a UTF-8 text file")
    try:
        return target.open("rb")
    except OSError as error:
        raise TextFileError(f"{path}: cannot read it: {error.strerror or error}") from None


def _decode(decoder, block: bytes, path: str | Path, offset: int, *, final: bool = False) -> str:
    try:
        return decoder.decode(block, final)
    except UnicodeDecodeError as error:
        raise TextFileError(f"{path}: is not UTF-8 text: byte {offset + error.start} is {block[error.start:error.start + 1]!r}"
                            "; convert it to UTF-8 (e.g. iconv -t utf-8)") from None


def read_lines(path: str | Path, *, wanted: str) -> list[str]:
    """The lines of a UTF-8 file (the final line break ends the last line; CRLF is a line break), each at
    least one character: an empty one is refused as ``path:line``, since it would be a prompt of nothing."""
    text = "".join(chunks(path, wanted=wanted))
    lines = [line.removesuffix("\r") for line in text.removesuffix("\n").split("\n")]  # only \n breaks a line
    for number, line in enumerate(lines, start=1):
        if not line:
            raise TextFileError(f"{path}:{number}: is an empty line; expected {wanted}, one per line "
                                "(remove the line, or give its text)")
    return lines
