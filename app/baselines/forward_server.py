"""The baseline models as forward-protocol servers (``future-ts-forward/1``, DESIGN.md section 3).

Standard library only: the baseline images copy this package to ``/app/baselines/`` and run
``python3 -u -m baselines.forward_server <model>``; the scorer imports the same files as
``app.baselines``. One JSON object per line on stdin, one answer per line on stdout (flushed),
diagnostics on stderr:

* ``hello``    → ``{"type":"ready"}``; the season comes from ``task.seasonality``, the seed from
  ``seed`` (both models are deterministic, so the seed changes nothing, but it is recorded).
* ``forecast`` → ``{"type":"prediction","request_id":...,"forecasts":[...]}`` with one entry per
  series, horizon and quantile levels taken from the request; a request that cannot be answered
  gets ``{"type":"error","request_id":...,"message":...}``.
* ``bye`` (or end of input) → exit 0.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable
from typing import Any, BinaryIO, TextIO

from .seasonal_naive import seasonal_naive
from .theta import theta

PROTOCOL = "future-ts-forward/1"

Forecast = tuple[list[float], dict[str, list[float]]]
Forecaster = Callable[[list[float], int, int, list[float]], Forecast]
MODELS: dict[str, Forecaster] = {"seasonal_naive": seasonal_naive, "theta": theta}


class RequestRejected(ValueError):
    """A forecast request this server cannot answer; the message goes back to the runner."""


def model_by_name(name: str) -> Forecaster:
    """The forecaster for ``seasonal_naive`` / ``seasonal-naive`` / ``theta``."""
    key = name.strip().lower().replace("-", "_")
    if key not in MODELS:
        raise KeyError(f"unknown baseline model {name!r}; known: {', '.join(sorted(MODELS))}")
    return MODELS[key]


def clean_history(target: list[Any]) -> list[float]:
    """Missing values (null, NaN, inf) are carried forward; leading ones are dropped.

    A series with no usable value at all becomes ``[0.0]`` so every model gets a non-empty history.
    A history with no missing value is returned unchanged (as floats), so the numbers equal a
    direct call of the model on the same list.
    """
    out: list[float] = []
    for value in target:
        if isinstance(value, bool) or not isinstance(value, int | float):
            number = math.nan
        else:
            number = float(value)
        if math.isfinite(number):
            out.append(number)
        elif out:
            out.append(out[-1])
    return out or [0.0]


def forecast_series(
    model: Forecaster,
    series: dict[str, Any],
    horizon: int,
    season: int,
    quantile_levels: list[float],
) -> dict[str, Any]:
    """One entry of a prediction's ``forecasts`` list."""
    target = series.get("target")
    if not isinstance(target, list):
        raise RequestRejected(f"series {series.get('item_id')!r} has no target list")
    mean, quantiles = model(clean_history(target), horizon, season, quantile_levels)
    return {"item_id": series.get("item_id"), "mean": mean, "quantiles": quantiles}


def _positive_int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise RequestRejected(f"{name} must be a non-negative integer, got {value!r}")
    return value


def _levels(value: Any) -> list[float]:
    if not isinstance(value, list) or not all(
        isinstance(v, int | float) and not isinstance(v, bool) and 0.0 < v < 1.0 for v in value
    ):
        raise RequestRejected(f"quantile_levels must be a list of numbers in (0, 1), got {value!r}")
    return [float(v) for v in value]


class BaselineSession:
    """The state of one container life: the model, the task's season and the seed."""

    def __init__(self, model: Forecaster, log: TextIO) -> None:
        self.model = model
        self.log = log
        self.season: int | None = None
        self.seed: int | None = None

    def hello(self, message: dict[str, Any]) -> dict[str, Any]:
        if message.get("protocol") not in (None, PROTOCOL):
            self.log.write(f"warning: runner speaks {message.get('protocol')!r}\n")
        task = message.get("task")
        season = task.get("seasonality", 1) if isinstance(task, dict) else 1
        self.season = season if isinstance(season, int) and season >= 1 else 1
        seed = message.get("seed")
        self.seed = seed if isinstance(seed, int) else None
        self.log.write(f"ready: season={self.season} seed={self.seed}\n")
        return {"type": "ready"}

    def forecast(self, message: dict[str, Any]) -> dict[str, Any]:
        request_id = message.get("request_id")
        try:
            if self.season is None:
                raise RequestRejected("forecast before hello")
            horizon = _positive_int(message.get("horizon"), "horizon")
            levels = _levels(message.get("quantile_levels", []))
            series = message.get("series")
            if not isinstance(series, list) or not all(isinstance(s, dict) for s in series):
                raise RequestRejected("series must be a list of objects")
            forecasts = [
                forecast_series(self.model, s, horizon, self.season, levels) for s in series
            ]
        except RequestRejected as exc:
            return {"type": "error", "request_id": request_id, "message": str(exc)}
        return {"type": "prediction", "request_id": request_id, "forecasts": forecasts}


def _encode(message: dict[str, Any]) -> bytes:
    # allow_nan=False: a non-finite number is never sent; the caller turns it into an error reply.
    return json.dumps(message, separators=(",", ":"), allow_nan=False).encode() + b"\n"


def _parse(raw: bytes, log: TextIO) -> dict[str, Any] | None:
    try:
        message = json.loads(raw)
    except ValueError as exc:
        log.write(f"unreadable line ({exc})\n")
        return None
    return message if isinstance(message, dict) else None


def _reply(session: BaselineSession, message: dict[str, Any] | None) -> dict[str, Any] | None:
    """The answer to one input message; ``None`` when it needs no answer."""
    if message is None:
        return {"type": "error", "request_id": None, "message": "a line is not a JSON object"}
    if message.get("type") == "hello":
        return session.hello(message)
    if message.get("type") == "forecast":
        return session.forecast(message)
    session.log.write(f"ignoring message of type {message.get('type')!r}\n")
    return None


def serve(model: Forecaster, stdin: BinaryIO, stdout: BinaryIO, log: TextIO) -> int:
    """Answer requests until ``bye`` or end of input; the return value is the exit status."""
    session = BaselineSession(model, log)
    for raw in stdin:
        message = _parse(raw, log)
        if message is not None and message.get("type") == "bye":
            return 0
        reply = _reply(session, message)
        if reply is None:
            continue
        try:
            line = _encode(reply)
        except ValueError:
            request_id = reply.get("request_id")
            error = "the model produced a non-finite value"
            line = _encode({"type": "error", "request_id": request_id, "message": error})
        stdout.write(line)
        stdout.flush()
    return 0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        sys.stderr.write(f"usage: python -m baselines.forward_server {{{'|'.join(MODELS)}}}\n")
        return 2
    try:
        model = model_by_name(args[0])
    except KeyError as exc:
        sys.stderr.write(f"{exc.args[0]}\n")
        return 2
    return serve(model, sys.stdin.buffer, sys.stdout.buffer, sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
