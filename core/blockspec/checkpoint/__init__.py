"""Weights on disk: checkpoint directories, manifests, locks, safetensors reading, weight checks, atomic writes."""
