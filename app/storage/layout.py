"""Archive layout: ``runs/<run_id>/<name>`` for every object a run leaves behind."""

from __future__ import annotations

from app.storage.port import validate_key

PREDICTIONS = "predictions.jsonl"
CHECKPOINT = "checkpoint"
RUN_MANIFEST = "run_manifest.json"
CONTAINER = "container.json"
STDERR = "stderr.log"
REPORT = "report.dsse.json"

CONTENT_TYPES = {
    PREDICTIONS: "application/x-ndjson",
    CHECKPOINT: "text/plain; charset=utf-8",
    RUN_MANIFEST: "application/json",
    CONTAINER: "application/json",
    STDERR: "text/plain; charset=utf-8",
    REPORT: "application/vnd.in-toto.benchmark-report+dsse",
}


def run_prefix(run_id: str) -> str:
    return validate_key(f"runs/{run_id}") + "/"


def run_key(run_id: str, name: str) -> str:
    """The object key of archive object ``name`` of run ``run_id``."""
    return validate_key(f"runs/{run_id}/{name}")


def report_name(version: int) -> str:
    """Report versions are new objects (``report.dsse.json``, ``report.v2.dsse.json``...)."""
    if version < 1:
        raise ValueError("report versions start at 1")
    return REPORT if version == 1 else f"report.v{version}.dsse.json"
