"""From a spec and a registry to a model: the assembler, deferred initialisation, counting, the build context."""
