"""The dev-only process backend through the whole pipeline: a `process:` command instead of an
image, sealed by a network namespace and cgroups, reported as `local_sealed_mvp`."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.auth.models import Role
from app.catalog import load_catalog
from app.clock import SystemClock
from app.evidence.keys import load_keyring
from app.evidence.report import peek_statement
from app.evidence.verify import StoreArchive, verify_report
from app.settings import Settings
from app.storage import build_store
from app.warnings import DevOnlyWarning
from tests.workers.conftest import NullQueue, api_for, make_token
from workers import pipeline
from workers.runner.factory import backend_from_settings
from workers.runner.slots import CpuSlots

ROOT = Path(__file__).resolve().parents[2]
COMMAND = "process:python3 -u -m app.baselines.forward_server seasonal-naive"


@pytest.fixture()
def process_api(committed: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                ) -> Iterator[tuple[TestClient, NullQueue, pipeline.Deps]]:
    settings = Settings(environment="test", data_dir=tmp_path, runner_backend="process")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DevOnlyWarning)
        deps = pipeline.Deps(settings, SystemClock(),
                             backend_from_settings(settings, process_cwd=ROOT),
                             build_store(settings), load_keyring(settings), load_catalog(),
                             CpuSlots.from_settings(settings))
    with api_for(deps, monkeypatch) as (client, queue):
        yield client, queue, deps


def _body(**over: object) -> dict[str, object]:
    body: dict[str, object] = {
        "image": COMMAND, "tasks": ["sunspots-yearly"], "tier": "public_dev",
        "metadata": {"model_name": "snaive-process", "organization": "dev",
                     "training_cutoff": "2010-01-01T00:00:00Z",
                     "frozen_at": "2010-01-02T00:00:00Z"}}
    body.update(over)
    return body


def test_process_command_runs_as_local_sealed_mvp(
        process_api: tuple[TestClient, NullQueue, pipeline.Deps]) -> None:
    client, queue, deps = process_api
    headers = {"Authorization": f"Bearer {make_token(Role.author)}"}
    r = client.post("/v1/submissions", json=_body(), headers=headers)
    assert r.status_code == 202, r.text
    assert r.json()["image_digest"].startswith("sha256:")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DevOnlyWarning)
        assert pipeline.execute_run(queue.sent[0], "test-worker") == "completed"
    run = client.get(f"/v1/runs/{queue.sent[0]}", headers=headers).json()
    assert run["operational_level"] == "local_sealed_mvp"
    envelope = client.get(f"/v1/runs/{queue.sent[0]}/report", headers=headers).content
    assert verify_report(envelope, StoreArchive(deps.store, queue.sent[0]),
                         client.get("/v1/keys").json()).ok
    predicate = peek_statement(envelope)["predicate"]
    assert predicate["operational_level"] == "local_sealed_mvp"
    assert predicate["sandbox"]["backend"] == "process"


def test_process_images_are_refused_outside_public_dev(
        process_api: tuple[TestClient, NullQueue, pipeline.Deps]) -> None:
    client, queue, _ = process_api
    headers = {"Authorization": f"Bearer {make_token(Role.author)}"}
    meta = {"model_name": "m", "organization": "o", "training_cutoff": "2010-01-01T00:00:00Z",
            "frozen_at": "2010-01-02T00:00:00Z", "pretraining_data_manifest": ["none"]}
    r = client.post("/v1/submissions", headers=headers, json=_body(
        tasks=["nile-yearly"], tier="blind_archive", metadata=meta))
    assert r.status_code == 422 and r.json()["error"] == "invalid_submission"
    assert queue.sent == []
