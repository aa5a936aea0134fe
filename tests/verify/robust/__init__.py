"""Components for the kit's robustness tests (tests/verify/test_robust.py), loaded as plugin modules.

``broken``: each breaks a promise it declares in a way only the robust checks see (trained parameters,
half precision, feature mixing, weak leaks, far positions). ``unusual``: correct but unusual components
the kit must pass (a learned activation parameter, a rotary encoder that scales, a zero-init bias table).
"""

DISTRIBUTION = "robust-dist"
VERSION = "0.0"
