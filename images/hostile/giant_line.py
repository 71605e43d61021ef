"""giant-line: says ready, then on the first request writes one 64 MiB line with no newline
(1 MiB at a time, 20 ms apart) and then waits forever without finishing the line."""

import sys
import time

from _common import messages, send

CHUNK = b"x" * (1024 * 1024)

if __name__ == "__main__":
    for message in messages():
        if message.get("type") == "hello":
            send({"type": "ready"})
        elif message.get("type") == "forecast":
            sys.stdout.buffer.write(b'{"type":"prediction","request_id":"')
            for _ in range(64):
                sys.stdout.buffer.write(CHUNK)
                sys.stdout.buffer.flush()
                time.sleep(0.02)
            while True:
                time.sleep(3600)
    sys.exit(0)
