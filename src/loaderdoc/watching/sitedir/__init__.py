"""The directory ``loaderdoc watch`` puts first on the child's PYTHONPATH: only its
``sitecustomize.py`` matters there (this file makes it package data of the wheel)."""
