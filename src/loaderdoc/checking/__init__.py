"""`loaderdoc check`'s headless core: the typed report (:mod:`.report`) and its producer (:mod:`.build`).

Importing the package loads nothing else: the command's parser names the schema without the rules."""

CHECK_SCHEMA = "loaderdoc.check/1"
