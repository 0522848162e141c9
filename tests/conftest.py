"""Session-wide test setup."""

from __future__ import annotations

import signal

# A shell without job control starts background jobs with SIGINT ignored, and exec keeps it
# ignored: a `.ci/run &` would hand that to every loaderdoc the tests start, and the Ctrl+C tests
# would send SIGINT to a process that (rightly) ignores it. A handled signal resets to its default
# on exec, so with a handler here each child starts as a foreground command would.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
