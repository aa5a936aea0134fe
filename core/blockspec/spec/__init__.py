"""The spec: its schema, reading and writing TOML, the strict converter, problems and validators. No torch."""
