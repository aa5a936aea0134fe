"""A sha256 computed on a worker thread, so two digests of the same bytes take the time of one.

A checkpoint's weights are hashed twice in one read: the whole file's sha256 and each
tensor's own. hashlib releases the GIL while it hashes a large buffer, so the file digest
can run on a second core while the caller hashes (and copies) the tensor.
"""

from __future__ import annotations

import hashlib
from concurrent.futures import Future, ThreadPoolExecutor


class BackgroundDigest:
    """``update`` returns at once; the bytes are hashed in order on one worker thread.

    At most one buffer waits: ``update`` first lets the previous one finish, so memory stays
    bounded by the two largest buffers, whatever the file's size. Use as a context manager.
    """

    def __init__(self) -> None:
        self._digest = hashlib.sha256()
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="blockspec-sha256")
        self._pending: Future | None = None

    def update(self, data: bytes | bytearray) -> None:
        self._wait()
        self._pending = self._worker.submit(self._digest.update, data)

    def hexdigest(self) -> str:
        self._wait()
        return self._digest.hexdigest()

    def _wait(self) -> None:
        if self._pending is not None:
            self._pending.result()  # re-raises a failure of the worker here
            self._pending = None

    def __enter__(self) -> BackgroundDigest:
        return self

    def __exit__(self, *_) -> None:
        self._worker.shutdown(wait=True)
