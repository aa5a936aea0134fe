"""Torch modules of the core: base classes for component kinds and the assembled model."""
