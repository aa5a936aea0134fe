"""Training: character data, the AdamW loop, distributed wrappers, atomic checkpoints.

Import the submodules directly (``blockspec.train.loop``); they need torch.
"""
