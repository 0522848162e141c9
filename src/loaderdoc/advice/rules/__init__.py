"""Diagnoses: one module per area, each registering its rules in the catalogue.

``evaluate(facts, settings, batch_bytes=..., probe=..., context=..., watch=...)`` runs every rule; the
order the area modules are imported in is the catalogue's order (and the order findings of one
severity are listed in). No torch, no textual.
"""

from loaderdoc.advice.context import TrainingContext

# isort: off
# registration: the import order is the catalogue's order
from loaderdoc.advice.rules import rejected  # noqa: F401
from loaderdoc.advice.rules import cpu  # noqa: F401
from loaderdoc.advice.rules import threads  # noqa: F401
from loaderdoc.advice.rules import shm  # noqa: F401
from loaderdoc.advice.rules import gpu  # noqa: F401
from loaderdoc.advice.rules import throughput  # noqa: F401
from loaderdoc.advice.rules import memory  # noqa: F401
from loaderdoc.advice.rules import files  # noqa: F401
from loaderdoc.advice.rules import crashes  # noqa: F401
from loaderdoc.advice.rules import training  # noqa: F401
# isort: on
from loaderdoc.advice.rules.registry import (
    RULES,
    WATCHED_JUDGES,
    Inputs,
    Rule,
    batch_bytes_from_probe,
    catalogue,
    change_text,
    describe,
    evaluate,
    get_rule,
    gpu_absence_known,
)

__all__ = ["RULES", "WATCHED_JUDGES", "Inputs", "Rule", "TrainingContext", "batch_bytes_from_probe", "catalogue", "change_text",
           "describe", "evaluate", "get_rule", "gpu_absence_known"]
