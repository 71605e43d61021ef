"""spin: says ready, then burns CPU forever without reading another line."""

import sys

from _common import messages, send

if __name__ == "__main__":
    for message in messages():
        if message.get("type") == "hello":
            send({"type": "ready"})
            break
    n = 0
    while True:
        n = (n * 1103515245 + 12345) % 2**31
    sys.exit(0)
