"""wrong-shape: says ready, then answers every request with a prediction that is wrong in one of
five ways, in turn: mean one step short, NaN in the mean, the wrong request_id, no forecasts at
all, and null values with misspelt quantile keys."""

import sys

from _common import last_value, serve

_count = 0


def answer(request: dict) -> dict:
    global _count
    variant = _count % 5
    _count += 1
    reply = last_value(request)
    for forecast in reply["forecasts"]:
        if variant == 0:
            forecast["mean"] = forecast["mean"][:-1]
        elif variant == 1:
            forecast["mean"][0] = float("nan")
        elif variant == 4:
            forecast["mean"][0] = None
            forecast["quantiles"] = {f"{k}%": v for k, v in forecast["quantiles"].items()}
    if variant == 2:
        reply["request_id"] = f"not-{request.get('request_id')}"
    elif variant == 3:
        reply["forecasts"] = []
    return reply


if __name__ == "__main__":
    sys.exit(serve(answer))
