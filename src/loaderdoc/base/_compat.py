"""Python-version shims."""

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the same parser, packaged as tomli
    import tomli as tomllib  # type: ignore[no-redef]

__all__ = ["tomllib"]
