"""echo-fast: answers every request at once with a valid constant forecast (overhead benches)."""

import sys

from _common import constant, serve

if __name__ == "__main__":
    sys.exit(serve(lambda request: constant(request, 0.0)))
