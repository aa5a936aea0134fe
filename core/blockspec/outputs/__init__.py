"""Outputs: the policy for what may be written where, and the locks that keep two writers apart.

Torch-free and below the spec layer: it imports only ``blockspec.errors`` and the standard library.
"""
