"""The whole conformance kit against this distribution: one test per component x declared property."""

from blockspec.testing import verify_distribution

test_conformance = verify_distribution("blockspec-extras")
