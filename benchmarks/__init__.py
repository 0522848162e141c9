"""Rerunnable measurements (not tests); also importable, e.g. ``--dataset benchmarks.torchvision_pipeline:make_dataset``."""
