"""The worker-thread sha256 gives hashlib's digest for the same bytes, in order."""

from __future__ import annotations

import hashlib

from hypothesis import given
from hypothesis import strategies as st

from blockspec.checkpoint.digest import BackgroundDigest


@given(st.lists(st.binary(max_size=5000), max_size=20))
def test_same_digest_as_hashlib_in_order(chunks):
    with BackgroundDigest() as background:
        for chunk in chunks:
            background.update(bytearray(chunk))
        digest = background.hexdigest()
    assert digest == hashlib.sha256(b"".join(chunks)).hexdigest()


def test_a_large_buffer_is_hashed_whole():
    data = bytes(range(256)) * 40_000  # 10 MB: hashlib releases the GIL for it
    with BackgroundDigest() as background:
        background.update(data[:3_000_000])
        background.update(memoryview(data)[3_000_000:])
        assert background.hexdigest() == hashlib.sha256(data).hexdigest()
