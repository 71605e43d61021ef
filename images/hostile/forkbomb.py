"""forkbomb: on the first request, forks sleeping children until the kernel refuses, then keeps
answering. Capped at 4096 children so that a run without a pids limit cannot take a host down.
Children close stdin/stdout and exit when their parent is gone."""

import os
import sys
import time

from _common import last_value, log, serve

CAP = 4096
_forked = False


def _child(parent: int) -> None:
    for fd in (0, 1):
        os.close(fd)
    while os.getppid() == parent:
        time.sleep(1.0)
    os._exit(0)


def answer(request: dict) -> dict:
    global _forked
    if not _forked:
        _forked = True
        parent = os.getpid()
        for n in range(CAP):
            try:
                pid = os.fork()
            except OSError as exc:
                log(f"fork refused after {n} children: {exc!r}")
                break
            if pid == 0:
                _child(parent)
        else:
            log(f"stopped at the cap of {CAP} children")
    return last_value(request)


if __name__ == "__main__":
    sys.exit(serve(answer))
