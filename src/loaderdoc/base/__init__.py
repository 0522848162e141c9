"""The base every feature shares, lowest first: units, errors, _compat, _serde, visible and torchload
(plain values and the one torch import); output, safe_write, own_files, textfile and preflight (files
and streams, written whole or not at all); jsondoc, usercode and batches (report documents, the
user's code, batch digests); settings (a DataLoader's settings); summary (the machine in lines).
No feature, no front: tests/test_layering.py holds the levels.
"""
