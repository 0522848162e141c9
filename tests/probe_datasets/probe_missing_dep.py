"""A user module that imports a package that is not installed."""

import loaderdoc_no_such_dependency  # noqa: F401


def make():
    return []
