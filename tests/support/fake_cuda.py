"""A stand-in for torch's CUDA state, so the probe's CUDA paths run without a GPU (issue 48).

It behaves as torch does where it matters to the probe: CUDA starts lazily (``torch.cuda.init()``,
the pinned DataLoader's ``torch.accelerator.current_device_index()``, the pin-memory thread's
``set_device_index``, pinning a batch), and a fork of a process that started it is a bad fork whose
first CUDA call raises torch's own "Cannot re-initialize CUDA in forked subprocess". Pinning
returns the batch as it is (there is no GPU to pin for) and the simulated GPU step starts CUDA
then sleeps. Every start and refusal is written to ``$FAKE_CUDA_LOG`` as ``pid event``.
Installed by ``fake_cuda_site/sitecustomize.py`` in processes started with ``FAKE_CUDA=1``.
"""

from __future__ import annotations

import os

STATE = {"initialized": False, "bad_fork": False}
REFUSAL = ("Cannot re-initialize CUDA in forked subprocess. To use CUDA with multiprocessing, you must use "
           "the 'spawn' start method")


def _record(event: str) -> None:
    log = os.environ.get("FAKE_CUDA_LOG")
    if log:
        with open(log, "a") as fh:
            fh.write(f"{os.getpid()} {event}\n")


def lazy_init() -> None:
    if STATE["bad_fork"]:
        _record("refused")
        raise RuntimeError(REFUSAL)
    if not STATE["initialized"]:
        STATE["initialized"] = True
        _record("init")


def _after_fork_in_child() -> None:
    if STATE["initialized"]:
        STATE["initialized"] = False
        STATE["bad_fork"] = True


def install() -> None:
    import torch
    import torch.utils.data._utils.pin_memory as pinning

    from loaderdoc.probing import consumer
    from loaderdoc.probing import probe as api

    os.register_at_fork(after_in_child=_after_fork_in_child)
    torch.cuda.is_initialized = lambda: STATE["initialized"]
    torch.cuda.init = lazy_init
    torch.accelerator.is_available = lambda: True
    torch.accelerator.current_accelerator = lambda check_available=False: torch.device("cuda")
    torch.accelerator.current_device_index = lambda: (lazy_init(), 0)[1]
    torch.accelerator.set_device_index = lambda index: lazy_init()

    def pin_memory(data, device=None):
        lazy_init()
        return data

    pinning.pin_memory = pin_memory

    class FakeCudaConsumer(consumer.SleepConsumer):
        kind = "cuda-kernel"

        def __init__(self, step_ms: float, device: str = "cuda") -> None:
            lazy_init()
            super().__init__(step_ms)

    consumer.CudaConsumer = FakeCudaConsumer
    api._device = lambda facts: "cuda"
