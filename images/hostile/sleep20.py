"""sleep20: valid last-value answers after sleeping 20 ms per request (fixed: no env or args)."""

import sys
import time

from _common import last_value, serve

DELAY_S = 0.020


def answer(request: dict) -> dict:
    time.sleep(DELAY_S)
    return last_value(request)


if __name__ == "__main__":
    sys.exit(serve(answer))
