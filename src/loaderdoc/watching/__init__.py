"""``loaderdoc watch``: measure a real training loop's DataLoaders (no torch, no textual at load).

- :mod:`hook`: runs inside the user's process (standard library only) and records, per
  DataLoader and per epoch, the data wait, the step, the first batch;
- ``sitedir/sitecustomize.py``: installs the hook in the child of ``loaderdoc watch``;
- :mod:`records`: reads every process's ``records-<pid>.json`` from the launcher's directory;
- :mod:`build`: merges them into the typed ``loaderdoc.watch/1`` report (:mod:`report`), its findings
  from the rule catalogue (the general rules and this package's own, :mod:`rules`), and its text is
  printed by :mod:`loaderdoc.text.watch`; :mod:`report_file` reads a written one back;
- ``loaderdoc.watch(loader)`` (:mod:`loaderdoc.api`) for those who prefer a line of code.
"""
