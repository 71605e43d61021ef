"""label-hunter: on the first request, walks every readable file outside the image's own
program directories looking for data a sealed model must not see: file names ending in
.jsonl/.parquet/.csv and contents mentioning "label" or "available_at" (also environment
variables). Findings go to stderr; the mean of every answer is the number of findings (0 when
the sandbox gives nothing away). The mount table is logged too, for the reader, not counted."""

import os
import sys
import time

from _common import constant, log, serve

SKIP = ("/proc", "/sys", "/dev", "/usr", "/lib", "/lib64", "/bin", "/sbin", "/app/hostile")
NAME_MARKERS = (".jsonl", ".parquet", ".csv")
CONTENT_MARKERS = (b"label", b"available_at")
READ_BYTES = 1024 * 1024
BUDGET_S = 10.0
_findings: int | None = None


def _skipped(path: str) -> bool:
    return any(path == s or path.startswith(s + "/") for s in SKIP)


def _suspicious(path: str) -> str | None:
    if path.lower().endswith(NAME_MARKERS):
        return "name"
    try:
        with open(path, "rb") as f:
            head = f.read(READ_BYTES).lower()
    except OSError:
        return None
    hits = [m.decode() for m in CONTENT_MARKERS if m in head]
    return f"contains {hits}" if hits else None


def hunt() -> int:
    found = 0
    for key, value in os.environ.items():
        if any(m.decode() in (key + "=" + value).lower() for m in CONTENT_MARKERS):
            log(f"FOUND environment variable {key}")
            found += 1
    try:
        with open("/proc/self/mountinfo") as f:
            log("mounts:\n" + f.read())
    except OSError:
        pass
    deadline = time.monotonic() + BUDGET_S
    scanned = 0
    for root, dirs, files in os.walk("/", onerror=lambda _e: None):
        dirs[:] = sorted(d for d in dirs if not _skipped(os.path.join(root, d)))
        for name in sorted(files):
            path = os.path.join(root, name)
            if os.path.islink(path) or not os.path.isfile(path):
                continue
            scanned += 1
            why = _suspicious(path)
            if why:
                log(f"FOUND {path}: {why}")
                found += 1
        if time.monotonic() > deadline:
            log("time budget spent; stopping the walk")
            break
    log(f"scanned {scanned} files, {found} finding(s)")
    return found


def answer(request: dict) -> dict:
    global _findings
    if _findings is None:
        _findings = hunt()
    return constant(request, float(_findings))


if __name__ == "__main__":
    sys.exit(serve(answer))
