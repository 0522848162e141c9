"""The watch feature's diagnoses of a real run, registered in the rule catalogue after the general
rules (the import order below is their order): :mod:`.run` (starvation, CPU, reads, stragglers,
workers), :mod:`.faults` (a replayed stream, a loader that did not start) and :mod:`.judges` (the
watched run's judgement of cpu-oversubscribed and threads-oversubscribed). Whatever evaluates a
watched loader imports this package first.
"""

# isort: off
# registration: the import order is the catalogue's order
from loaderdoc.watching.rules import run  # noqa: F401
from loaderdoc.watching.rules import faults  # noqa: F401
from loaderdoc.watching.rules import judges  # noqa: F401
# isort: on
