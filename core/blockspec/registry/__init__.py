"""Components and who provides them: hookspecs, plugin loading and quarantine, the catalogue and the load policy. No torch."""
