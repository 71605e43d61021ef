"""nondeterministic: valid answers plus OS-random noise; the seed from hello is ignored."""

import random
import sys

from _common import last_observed, prediction, serve

_noise = random.SystemRandom()


def answer(request: dict) -> dict:
    return prediction(request, lambda series, _h: last_observed(series) + _noise.gauss(0.0, 1.0))


if __name__ == "__main__":
    sys.exit(serve(answer))
