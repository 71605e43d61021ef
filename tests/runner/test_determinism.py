"""The determinism probe with local fake models (the podman version is in test_podman.py)."""

from __future__ import annotations

from typing import Any

from app.hardware import HardwareClass
from tests.runner.helpers import Recorder, fake_process, make_card, make_requests
from workers.runner.determinism import comparable_forecasts, probe_determinism
from workers.runner.forward import drive_task
from workers.runner.port import ImageRecord, OperationalLevel, SealedProcess, SealedSpec


class FakeBackend:
    """Starts the fake model in the mode named by the spec's image (``fake:<mode>``)."""

    name = "fake"
    operational_level: OperationalLevel = "local_sealed_mvp"

    def __init__(self) -> None:
        self.started: list[str] = []

    def ensure_image(self, image: str) -> ImageRecord:
        raise NotImplementedError

    def start(self, spec: SealedSpec) -> SealedProcess:
        self.started.append(spec.name)
        return fake_process(spec.image.removeprefix("fake:"))

    def remove(self, name: str) -> None:
        pass

    def cleanup_orphans(self, prefix: str = "fts-") -> list[str]:
        return []

    def sealed_config(self, spec: SealedSpec) -> dict[str, Any]:
        return {}

    def sealed_config_digest(self, spec: SealedSpec) -> str:
        return "sha256:" + "0" * 64


def probe(mode: str) -> tuple[Any, FakeBackend]:
    card = make_card(windows=4)
    requests = make_requests(card)
    main = Recorder()
    outcome = drive_task(fake_process(mode), card=card, requests=requests, seed=5, run_id="r",
                         on_record=main)
    assert outcome.status == "completed"
    backend = FakeBackend()
    counter = iter(range(100))

    def fresh() -> SealedSpec:
        return SealedSpec(name=f"fts-probe-{next(counter)}", image=f"fake:{mode}", cpuset="0",
                          hardware=HardwareClass("c", cpus=1, memory_mb=64, pids=8))

    result = probe_determinism(backend, fresh, card, requests, 5, n_windows=2,
                               reference_records=main.records, run_id="r")
    return result, backend


def test_a_seeded_model_is_deterministic() -> None:
    result, backend = probe("seed")
    assert result and result.deterministic and result.conclusive
    assert result.compared_windows == ["w0", "w1"] and result.mismatched_windows == []
    assert backend.started == ["fts-probe-0"]  # a fresh container
    assert len(result.probe_records) == 2


def test_a_random_model_is_not() -> None:
    result, _ = probe("random")
    assert not result and result.conclusive
    assert result.mismatched_windows == ["w0", "w1"]


def test_a_failed_probe_is_inconclusive() -> None:
    card = make_card(windows=3)
    requests = make_requests(card)
    main = Recorder()
    drive_task(fake_process("ok"), card=card, requests=requests, seed=5, run_id="r",
               on_record=main)
    result = probe_determinism(
        FakeBackend(),
        lambda: SealedSpec(name="fts-x", image="fake:crash-at-start", cpuset="0",
                           hardware=HardwareClass("c", cpus=1, memory_mb=64, pids=8)),
        card, requests, 5, n_windows=2, reference_records=main.records, run_id="r",
    )
    assert not result.deterministic and not result.conclusive
    assert result.outcome.status == "container_crashed"


def test_forecasts_compare_regardless_of_item_order() -> None:
    a = {"forecasts": [{"item_id": "b", "mean": [1.0]}, {"item_id": "a", "mean": [2.0]}]}
    b = {"forecasts": [{"item_id": "a", "mean": [2.0]}, {"item_id": "b", "mean": [1.0]}]}
    assert comparable_forecasts(a) == comparable_forecasts(b)
    assert comparable_forecasts({"type": "error"}) is None
