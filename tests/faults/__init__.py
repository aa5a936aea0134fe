"""The fault-injection suite: each fault, and what blockspec promises under it (docs/reliability.md)."""
