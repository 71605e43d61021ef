"""flood: says ready, then on the first request writes JSON lines that are not answers, forever."""

import sys

from _common import messages, send

if __name__ == "__main__":
    for message in messages():
        if message.get("type") == "hello":
            send({"type": "ready"})
        elif message.get("type") == "forecast":
            line = b'{"type":"log","message":"' + b"flood " * 100 + b'"}\n'
            out = sys.stdout.buffer
            while True:
                out.write(line)
    sys.exit(0)
