"""garbage: says ready, then answers every request with lines that are not JSON."""

import sys

from _common import messages, send

if __name__ == "__main__":
    for message in messages():
        kind = message.get("type")
        if kind == "hello":
            send({"type": "ready"})
        elif kind == "forecast":
            sys.stdout.buffer.write(b'this is not json {"type": prediction\n')
            sys.stdout.buffer.write(b"\x00\xff\xfe garbage bytes\n")
            sys.stdout.buffer.flush()
        elif kind == "bye":
            break
    sys.exit(0)
