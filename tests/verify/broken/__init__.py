"""Deliberately broken components: each claims a promise it does not keep.

They are plugin modules, loaded with ``load_registry(plugins=[(module, "broken-dist", "0.0")])``
and never installed; the conformance kit must catch every one of them.
"""

DISTRIBUTION = "broken-dist"
VERSION = "0.0"
