"""oom: on the first request, allocates and touches 4 GiB, 64 MiB every 10 ms, then answers."""

import sys
import time

from _common import last_value, log, serve

CHUNK = 64 * 1024 * 1024
TOTAL = 4 * 1024 * 1024 * 1024
_held: list[bytearray] = []


def answer(request: dict) -> dict:
    while len(_held) * CHUNK < TOTAL:
        _held.append(bytearray(b"\x5a") * CHUNK)  # repetition writes every page, so RSS grows
        if len(_held) % 4 == 0:
            log(f"holding {len(_held) * CHUNK // 2**20} MiB")
        time.sleep(0.01)
    return last_value(request)


if __name__ == "__main__":
    sys.exit(serve(answer))
