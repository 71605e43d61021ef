"""``LocalDirectoryStore`` specifics: the dev-only warning and files that cannot be rewritten."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest

from app.settings import Settings
from app.storage import ObjectAlreadyExists, StoreUnavailable, build_store, init_store
from app.storage.local import LocalDirectoryStore
from app.warnings import DevOnlyWarning


def test_construction_warns_that_it_is_not_write_once(tmp_path: Path) -> None:
    with pytest.warns(DevOnlyWarning, match="not write-once"):
        LocalDirectoryStore(tmp_path)


def _store(tmp_path: Path) -> LocalDirectoryStore:
    with pytest.warns(DevOnlyWarning):
        return LocalDirectoryStore(tmp_path / "archive")


def test_objects_are_read_only_files_without_leftovers(tmp_path: Path) -> None:
    store = _store(tmp_path)
    stored = store.put_once("runs/r1/checkpoint", b"note")
    path = tmp_path / "archive" / "runs" / "r1" / "checkpoint"
    assert stored.uri == path.as_uri()
    assert stat.S_IMODE(path.stat().st_mode) == 0o444
    with pytest.raises(ObjectAlreadyExists):
        store.put_once("runs/r1/checkpoint", b"other")
    assert os.listdir(path.parent) == ["checkpoint"]


def test_concurrent_writers_one_wins(tmp_path: Path) -> None:
    store = _store(tmp_path)
    outcomes: list[str] = []

    def write(i: int) -> None:
        try:
            store.put_once("runs/r1/report.dsse.json", f"writer {i}".encode())
            outcomes.append("stored")
        except ObjectAlreadyExists:
            outcomes.append("refused")

    threads = [threading.Thread(target=write, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["refused"] * 7 + ["stored"]


def test_check_fails_when_the_directory_is_gone(tmp_path: Path) -> None:
    store = _store(tmp_path)
    (tmp_path / "archive").rmdir()
    with pytest.raises(StoreUnavailable):
        store.check()


def test_build_store_and_init_store_for_local_settings(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, store="local")
    with pytest.warns(DevOnlyWarning):
        store = build_store(settings)
    assert isinstance(store, LocalDirectoryStore) and store.root == settings.local_store_dir
    with pytest.warns(DevOnlyWarning):
        assert "not write-once" in init_store(settings)
