"""The conformance kit against every first-party component: one test per component x declared property."""

from blockspec.testing import verify_distribution

test_builtin = verify_distribution("blockspec")
test_positional = verify_distribution("blockspec-positional")
test_norms = verify_distribution("blockspec-norms")
test_activations = verify_distribution("blockspec-activations")
test_heads = verify_distribution("blockspec-heads")
test_moe = verify_distribution("blockspec-moe")
test_adapters = verify_distribution("blockspec-adapters")
