"""``loaderdoc watch``: measure a real training loop's DataLoaders (no torch, no textual at load).

- :mod:`hook`: runs inside the user's process (standard library only) and records, per
  DataLoader and per epoch, the data wait, the step, the first batch;
- ``sitedir/sitecustomize.py``: installs the hook in the child of ``loaderdoc watch``;
- :mod:`records`: reads every process's ``records-<pid>.json`` from the launcher's directory;
- :mod:`report`: merges them into the ``loaderdoc.watch/1`` report, its findings from the rule
  catalogue (``watching.rules.run`` and the machine and settings rules), and
  its text is printed by :mod:`loaderdoc.text.watch`;
- ``loaderdoc.watch(loader)`` (:mod:`loaderdoc.api`) for those who prefer a line of code.
"""
