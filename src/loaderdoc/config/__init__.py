"""Reading the config files users already have, whatever their layout, and never inventing a setting.

``read_config(path)`` parses TOML, YAML, JSON or a Python config (read with ``ast``, never run),
follows what it inherits (mmengine ``_base_`` and ``read_base()``, detectron2 ``_BASE_`` and
LazyConfig imports, Hydra ``defaults``, ``${...}`` interpolation), and finds every DataLoader in it
by what its keys mean (:mod:`.meaning`), refined by known layouts (:mod:`.layouts`), with the file
and line of every setting. ``load_settings(path)`` gives the first loader's settings. No torch, no textual.
"""

from loaderdoc.config.files import ConfigFile, load_settings, read_config
from loaderdoc.config.meaning import FoundLoader

__all__ = ["ConfigFile", "FoundLoader", "load_settings", "read_config"]
