"""Child processes that do not outlive the process that started them, even when it is killed with SIGKILL."""

import ctypes
import signal
import sys

PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_parent() -> None:
    """Popen's preexec_fn (runs in the child between fork and exec): the kernel sends the child SIGTERM when the
    thread that started it dies. Linux only; elsewhere a no-op."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
