"""write-outside: at hello, tries to create a file in places a sealed model must not write
(/, /app, /etc, /artifact, /usr, /retrieval) and in the scratch places it may (/tmp, /var/tmp,
/dev/shm). Reports each attempt on stderr, then answers normally with a mean equal to the number of
forbidden places it could write to (0 in a correct sandbox)."""

import os
import sys

from _common import constant, log, serve

FORBIDDEN = ["/", "/app", "/etc", "/artifact", "/usr", "/retrieval"]
SCRATCH = ["/tmp", "/var/tmp", "/dev/shm"]
_escaped = 0


def _try_write(directory: str) -> bool:
    path = os.path.join(directory, f".future-ts-write-probe-{os.getpid()}")
    try:
        with open(path, "wb") as f:
            f.write(b"written from inside the container\n")
        os.unlink(path)
    except OSError as exc:
        log(f"write {directory}: refused ({exc.strerror})")
        return False
    log(f"write {directory}: WRITTEN")
    return True


def on_hello(_message: dict) -> None:
    global _escaped
    _escaped = sum(_try_write(d) for d in FORBIDDEN)
    for d in SCRATCH:
        _try_write(d)
    log(f"{_escaped} forbidden place(s) writable")


if __name__ == "__main__":
    sys.exit(serve(lambda request: constant(request, float(_escaped)), on_hello))
