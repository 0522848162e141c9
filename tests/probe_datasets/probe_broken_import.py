"""A user module that fails while importing."""

raise RuntimeError("config.yaml missing")
