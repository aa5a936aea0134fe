"""Norm modules beyond PyTorch's own: the (1 + w) RMSNorm is the core's building block, shared with the
built-in attention's q/k norms."""

from __future__ import annotations

from blockspec.plugin import OffsetRMSNorm

__all__ = ["OffsetRMSNorm"]
