"""Decoding from a language model: the sampling loop (``tokens``), its bounds (``bounds``) and the
notebook call over a model or any source (``text``). Above the trainer, below evaluation, which decodes
for the harness's generation tasks."""
