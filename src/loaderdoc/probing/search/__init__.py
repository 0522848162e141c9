"""The probe's search: which configurations to measure within a time budget, and which to pick.

:mod:`.core` holds :class:`Search` (what was measured, the budget, the order of the steps) and
its outcome's reading; each step of the search is a module of functions over a ``Search``:
:mod:`.shared_cpus` (CPU work beside busy processes), :mod:`.past_cpus` (one worker past the CPU
count), :mod:`.prefetch`, :mod:`.in_order`, :mod:`.repeats` (contenders again, in turns, on a
busy machine), :mod:`.persistence` and :mod:`.outcome` (the pick and its reasons).
"""

from loaderdoc.probing.search.core import Measure, Search, SearchLimits

__all__ = ["Measure", "Search", "SearchLimits"]
