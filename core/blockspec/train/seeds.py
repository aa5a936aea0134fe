"""The seeds torch takes, stated once: training, sweeps and generation refuse any other before work starts."""

SEEDS = (-(2**63), 2**64 - 1)  # what torch.manual_seed takes
