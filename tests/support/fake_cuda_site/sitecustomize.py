"""Installs tests/support/fake_cuda.py in a process started with FAKE_CUDA=1 (and this folder on
PYTHONPATH, with tests/support beside it)."""

import os

if os.environ.get("FAKE_CUDA") == "1":
    import fake_cuda

    fake_cuda.install()
