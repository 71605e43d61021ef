"""The versioned catalog: built once per process from packaged data, then read-only."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from functools import cache
from typing import Any

from app.catalog import future_ts_v1
from app.catalog.builder import BuiltTask, build_task
from app.catalog.cards import TIERS, ForecastRequest, TaskCard, WindowLabels
from app.catalog.errors import UnknownCatalogVersion, UnknownSuite, UnknownTask
from app.catalog.sources import PACKAGE, package_version, sha256_id

DEFAULT_VERSION = "future-ts-v1"


class Catalog:
    """Task cards (public), forecast requests (sent to containers) and labels (platform only).

    Every accessor returns fresh copies, so a caller that mutates what it got cannot change
    what the next caller sees; ``shared_card`` alone hands out one copy to every caller, for
    the hot paths that only read.
    """

    def __init__(
        self, version: str, tasks: Mapping[str, BuiltTask], suites: Mapping[str, list[str]]
    ) -> None:
        self.version = version
        self._tasks = dict(tasks)
        self._shared_cards: dict[str, TaskCard] = {}
        self._suites = {name: list(ids) for name, ids in suites.items()}
        self.digest = sha256_id(self._digest_document())

    def _task(self, task_id: str) -> BuiltTask:
        try:
            return self._tasks[task_id]
        except KeyError:
            raise UnknownTask(task_id, self.version) from None

    def task_ids(self) -> list[str]:
        return list(self._tasks)

    def cards(self) -> list[TaskCard]:
        return [copy.deepcopy(t.card) for t in self._tasks.values()]

    def card(self, task_id: str) -> TaskCard:
        return copy.deepcopy(self._task(task_id).card)

    def shared_card(self, task_id: str) -> TaskCard:
        """The card, copied once and then the same object for every caller: read it, never
        change it. Intake validates every submission against its tasks' cards, and a deep copy
        per card and submission was 3 % of the API's CPU under load (bench/intake.py)."""
        card = self._shared_cards.get(task_id)
        if card is None:
            card = self._shared_cards[task_id] = self.card(task_id)
        return card

    def requests(self, task_id: str) -> list[ForecastRequest]:
        """History up to each window's issue time, trimmed to the context budget, in order."""
        return copy.deepcopy(list(self._task(task_id).requests))

    def labels(self, task_id: str) -> dict[str, WindowLabels]:
        """Platform-side truth, keyed by window id. Never hand this to a container."""
        return copy.deepcopy(self._task(task_id).labels)

    def suites(self) -> dict[str, list[str]]:
        return {name: list(ids) for name, ids in self._suites.items()}

    def suite(self, name: str) -> list[str]:
        try:
            return list(self._suites[name])
        except KeyError:
            raise UnknownSuite(name, self.version) from None

    def provenance(self) -> dict[str, str]:
        """The data package actually installed (the snapshot ids prove its numbers match)."""
        return {"package": PACKAGE, "installed_version": package_version()}

    def _digest_document(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "cards": [t.card.public_dict() for t in self._tasks.values()],
            "labels": {
                task_id: {
                    wid: {"available_at": lab.available_at, "targets": lab.targets}
                    for wid, lab in t.labels.items()
                }
                for task_id, t in self._tasks.items()
            },
            "suites": self._suites,
        }


def _build_v1() -> Catalog:
    tasks = {spec.task_id: build_task(spec) for spec in future_ts_v1.SPECS}
    suites: dict[str, list[str]] = {"all": list(tasks)}
    for tier in TIERS:
        suites[tier] = [tid for tid, t in tasks.items() if t.card.tier == tier]
    suites["smoke"] = list(future_ts_v1.SMOKE_SUITE)
    return Catalog(DEFAULT_VERSION, tasks, suites)


_BUILDERS = {DEFAULT_VERSION: _build_v1}


@cache
def load_catalog(version: str = DEFAULT_VERSION) -> Catalog:
    """The catalog named ``version``, built deterministically on first use and cached."""
    try:
        builder = _BUILDERS[version]
    except KeyError:
        raise UnknownCatalogVersion(version) from None
    return builder()


def catalog_digest(version: str = DEFAULT_VERSION) -> str:
    """``sha256:`` over the canonical JSON of every public card, every label and the suites."""
    return load_catalog(version).digest


def available_versions() -> list[str]:
    return list(_BUILDERS)
