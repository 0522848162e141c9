"""Reading the config files users already have, in the layouts of the projects they come from.

``read_config(path)`` parses TOML, YAML, JSON or a Python config (read with ``ast``, never run)
and finds every DataLoader in it (:mod:`.layouts`: loaderdoc's own ``[dataloader]`` table, mmengine,
LightningCLI, Hydra, Hugging Face TrainingArguments, timm, ml-cvnets), with where in the file each
setting was found. ``load_settings(path)`` gives the first loader's settings. No torch, no textual.
"""

from loaderdoc.config.files import ConfigFile, load_settings, read_config
from loaderdoc.config.layouts import FoundLoader

__all__ = ["ConfigFile", "FoundLoader", "load_settings", "read_config"]
