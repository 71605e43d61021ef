"""A stand-in model speaking future-ts-forward/1 with a chosen misbehaviour (stdlib only).

Usage: python fake_model.py <mode> [arg]. Modes: ok, slow <ms>, slow-every <k>, never-ready,
bad-ready, hang, garbage, giant-line, flood, unsolicited, exit-midrun, exit0-midrun, self-kill,
close-stdout, no-read, error, short, nan, wrong-id, no-forecasts, bad-keys, big-int, seed,
random, alloc <mb>, net, stderr-spam, crash-at-start.
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import sys
import time
from typing import Any

MODE = sys.argv[1] if len(sys.argv) > 1 else "ok"
ARG = sys.argv[2] if len(sys.argv) > 2 else ""
out = sys.stdout.buffer


def send(obj: object) -> None:
    out.write(json.dumps(obj, separators=(",", ":")).encode() + b"\n")
    out.flush()


def last(series: dict[str, Any]) -> float:
    for v in reversed(series.get("target") or []):
        if isinstance(v, int | float):
            return float(v)
    return 0.0


def predict(req: dict[str, Any], value: float | None = None) -> dict[str, Any]:
    h = req["horizon"]
    fcs = []
    for s in req["series"]:
        v = last(s) if value is None else value
        mean = [v] * h
        fcs.append({"item_id": s["item_id"], "mean": mean,
                    "quantiles": {repr(float(q)): list(mean) for q in req["quantile_levels"]}})
    return {"type": "prediction", "request_id": req["request_id"], "forecasts": fcs}


def net_probe() -> float:
    try:
        socket.create_connection(("127.0.0.1", 6379), timeout=0.5).close()
        return 1.0
    except OSError:
        return 0.0


def main() -> int:
    if MODE == "crash-at-start":
        sys.stderr.write("boom\n")
        return 5
    seed = 0
    n = 0
    held: list[bytearray] = []
    for raw in sys.stdin.buffer:
        msg = json.loads(raw)
        kind = msg.get("type")
        if kind == "hello":
            seed = msg["seed"]
            if MODE == "never-ready":
                while True:
                    time.sleep(3600)
            if MODE == "bad-ready":
                out.write(b"hello there\n")
                out.flush()
                continue
            send({"type": "ready"})
            if MODE == "no-read":
                while True:
                    time.sleep(3600)
            if MODE == "close-stdout":
                os.close(1)
                time.sleep(3600)
            continue
        if kind == "bye":
            return 0
        n += 1
        if MODE == "slow":
            time.sleep(float(ARG) / 1000)
        elif MODE == "slow-every" and n % int(ARG) == 0:
            time.sleep(0.3)
        elif MODE == "hang":
            time.sleep(3600)
        elif MODE == "garbage":
            out.write(b"\x00\xff not json\n")
            out.flush()
            continue
        elif MODE == "giant-line":
            out.write(b'{"type":"prediction","request_id":"')
            for _ in range(64):
                out.write(b"x" * (1 << 20))
                out.flush()
            time.sleep(3600)
        elif MODE == "flood":
            while True:
                out.write(b'{"type":"log","message":"flood"}\n')
        elif MODE in ("exit-midrun", "exit0-midrun", "self-kill") and n == 3:
            if MODE == "self-kill":
                os.kill(os.getpid(), signal.SIGKILL)
            return 3 if MODE == "exit-midrun" else 0
        elif MODE == "error":
            send({"type": "error", "request_id": msg["request_id"], "message": "cannot"})
            continue
        elif MODE == "alloc":
            held.append(bytearray(b"\x01") * (int(ARG) << 20))
        elif MODE == "stderr-spam":
            sys.stderr.write("x" * 100000 + "\n")
        reply = predict(msg, {"seed": float(seed), "random": random.random(),
                              "net": net_probe() if MODE == "net" else None}.get(MODE))
        if MODE == "short":
            reply["forecasts"][0]["mean"].pop()
        elif MODE == "nan":
            reply["forecasts"][0]["mean"][0] = float("nan")
        elif MODE == "wrong-id":
            reply["request_id"] = "nope"
        elif MODE == "no-forecasts":
            reply["forecasts"] = []
        elif MODE == "bad-keys":
            reply["forecasts"][0]["quantiles"] = {"0.10": [0.0]}
        elif MODE == "big-int":
            reply["extra"] = 2**60
        if MODE == "unsolicited":  # one write, so the extra line is there before the next request
            out.write(json.dumps(reply).encode() + b'\n{"type":"log","message":"by the way"}\n')
            out.flush()
            continue
        send(reply)
    return 0


if __name__ == "__main__":
    sys.exit(main())
