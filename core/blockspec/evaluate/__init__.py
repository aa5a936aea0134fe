"""Scoring what a spec composes: held-out text in units no tokenizer decides, and standard benchmarks.

Sits directly above ``blockspec.train``: it runs trained models and imports no command line.
"""
