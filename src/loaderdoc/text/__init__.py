"""The text the commands print, one module per report: reports (typed, from the core) in, lines
out. Plain text, no rich, no textual: the same on a terminal and in a pipe. The core never imports
this package (tests/test_layering.py)."""
