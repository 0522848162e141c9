"""Imported by ``site`` at start-up of every Python process under ``loaderdoc watch``.

With ``LOADERDOC_WATCH_DIR`` set it loads ``loaderdoc/watching/hook.py`` by path (standard
library only; loaderdoc itself need not be importable in the child) and installs the DataLoader
hook. Then it runs the ``sitecustomize`` this directory hides, if the environment has one. Nothing
here may break the user's program: a failure is one line on stderr.
"""

import os
import sys


def _here() -> str:
    return os.path.dirname(os.path.abspath(__file__))


def _install_hook() -> None:
    path = os.environ.get("LOADERDOC_WATCH_DIR")
    if not path:
        return
    import importlib.util

    hook_file = os.path.join(os.path.dirname(_here()), "hook.py")
    spec = importlib.util.spec_from_file_location("_loaderdoc_watch_hook", hook_file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    module.install(path)


def _run_hidden_sitecustomize() -> None:
    import importlib.machinery
    import importlib.util

    here = _here()
    others = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", others)
    if spec is None or spec.loader is None or spec.origin == os.path.abspath(__file__):
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules["sitecustomize"] = module


for _step in (_install_hook, _run_hidden_sitecustomize):
    try:
        _step()
    except Exception as _exc:  # the user's program must run regardless
        sys.stderr.write(f"loaderdoc watch: {_step.__name__.strip('_')} failed: {_exc}\n")
