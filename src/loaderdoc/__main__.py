"""``python -m loaderdoc``."""

from loaderdoc.cli import run_as_program

run_as_program()
