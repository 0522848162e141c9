"""``loaderdoc watch``: measure a real training loop's DataLoaders (no torch, no textual at load).

- :mod:`hook`: runs inside the user's process (standard library only) and records, per
  DataLoader and per epoch, the data wait, the step, the first batch;
- ``sitedir/sitecustomize.py``: installs the hook in the child of ``loaderdoc watch``;
- :mod:`report`: turns the records into the ``loaderdoc.watch/1`` report and its findings;
- :mod:`api`: ``loaderdoc.watch(loader)`` for those who prefer a line of code.
"""
