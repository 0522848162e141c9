"""Session-wide test setup."""

from __future__ import annotations

import signal

# A shell without job control starts background jobs with SIGINT and SIGQUIT ignored, and exec
# keeps them ignored: a `.ci/run &` would hand that to every loaderdoc the tests start, and the
# signal tests would send SIGINT or SIGQUIT to a process that (rightly, as a bare command would)
# ignores it: the watch launcher then waits for a command that never got it. A handled signal
# resets to its default on exec, as does one set to its default here, so each child starts as a
# foreground command would.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
# nohup does the same to SIGHUP.
for _name in ("SIGQUIT", "SIGHUP"):
    if signal.getsignal(getattr(signal, _name)) is signal.SIG_IGN:
        signal.signal(getattr(signal, _name), signal.SIG_DFL)
