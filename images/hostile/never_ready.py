"""never-ready: reads hello and never answers; it ignores end of input and sleeps forever."""

import sys
import time

if __name__ == "__main__":
    sys.stdin.buffer.readline()
    sys.stderr.write("got hello; not answering\n")
    sys.stderr.flush()
    while True:
        time.sleep(3600)
