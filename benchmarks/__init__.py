"""Side-by-side speed and memory of blockspec models against a hand-written model and Hugging Face.

Run ``python benchmarks/run.py --out benchmarks/results``; see docs/performance.md.
"""
