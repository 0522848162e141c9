"""The live probe as a library: measure real DataLoaders on this machine and recommend settings.

The public entry point is :func:`loaderdoc.probing.probe.probe`, also reachable as
``loaderdoc.probe(...)``. Importing this package does not import torch.
"""
