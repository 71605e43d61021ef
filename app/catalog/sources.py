"""Read the real public time series that statsmodels ships inside its wheel.

Nothing is downloaded: the CSV files are located inside the installed distribution and parsed
with the standard library (no pandas, so the numbers cannot depend on a parser version). A
:class:`SourceSnapshot` is the exact data a task is built from; its ``snapshot_id`` is the
SHA-256 of the snapshot's RFC 8785 canonical JSON.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from app.catalog.calendar import iso
from app.evidence.jcs import canonical_sha256

PACKAGE = "statsmodels"
_MONTHS = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")


@dataclass(frozen=True)
class RawTable:
    """A dataset as packaged: one timestamp per row, numeric columns (``None`` = missing)."""

    freq: str
    timestamps: list[datetime]
    columns: dict[str, list[float | None]]


@dataclass(frozen=True)
class SourceSnapshot:
    """The data one task is built from, after the documented selection."""

    dataset: str  # e.g. "statsmodels.datasets.sunspots"
    file: str
    freq: str
    selection: str  # how the rows were chosen from the packaged table, in words
    timestamps: tuple[datetime, ...]
    series: dict[str, tuple[float, ...]]  # item_id -> values, aligned with timestamps

    def canonical(self) -> dict[str, Any]:
        return {
            "dataset": self.dataset,
            "file": self.file,
            "freq": self.freq,
            "selection": self.selection,
            "timestamps": [iso(ts) for ts in self.timestamps],
            "series": {item: list(values) for item, values in self.series.items()},
        }

    @property
    def snapshot_id(self) -> str:
        return sha256_id(self.canonical())


def sha256_id(document: Any) -> str:
    """``"sha256:<hex>"`` of the RFC 8785 canonical JSON of ``document``."""
    return "sha256:" + canonical_sha256(document)


def package_version() -> str:
    return metadata.version(PACKAGE)


def _read_rows(dataset: str, filename: str) -> list[list[str]]:
    relative = f"statsmodels/datasets/{dataset}/{filename}"
    located = Path(str(metadata.distribution(PACKAGE).locate_file(relative)))
    text = located.read_text(encoding="utf-8-sig")  # danish_data's file starts with a BOM
    return [row for row in csv.reader(io.StringIO(text)) if row]


def _number(text: str) -> float | None:
    text = text.strip()
    return None if text in ("", "NA", "NaN", "nan") else float(text)


def _utc(year: int, month: int = 1, day: int = 1) -> datetime:
    return datetime(year, month, day, tzinfo=UTC)


def _year_value(dataset: str, filename: str) -> RawTable:
    header, *rows = _read_rows(dataset, filename)
    column = header[1].strip().lower()
    return RawTable("YS", [_utc(int(r[0])) for r in rows], {column: [_number(r[1]) for r in rows]})


def _sunspots() -> RawTable:
    return _year_value("sunspots", "sunspots.csv")


def _nile() -> RawTable:
    return _year_value("nile", "nile.csv")


def _elnino() -> RawTable:
    """Wide table (a row per year, a column per month) unrolled into one monthly series."""
    header, *rows = _read_rows("elnino", "elnino.csv")
    assert [h.upper() for h in header[1:]] == list(_MONTHS)
    stamps = [_utc(int(r[0]), m + 1) for r in rows for m in range(12)]
    values = [_number(r[m + 1]) for r in rows for m in range(12)]
    return RawTable("MS", stamps, {"nino12": values})


def _elec_equip() -> RawTable:
    header, *rows = _read_rows("elec_equip", "elec_equip.csv")
    stamps = []
    for row in rows:  # "Jan-1-1995"; month names parsed by hand so no locale can change them
        month, day, year = row[0].split("-")
        stamps.append(_utc(int(year), _MONTHS.index(month.upper()) + 1, int(day)))
    return RawTable("MS", stamps, {header[1]: [_number(r[1]) for r in rows]})


def _co2() -> RawTable:
    _, *rows = _read_rows("co2", "co2.csv")
    stamps = [_utc(int(r[0][:4]), int(r[0][4:6]), int(r[0][6:8])) for r in rows]
    return RawTable("W-SAT", stamps, {"co2": [_number(r[1]) for r in rows]})


def _macrodata() -> RawTable:
    header, *rows = _read_rows("macrodata", "macrodata.csv")
    stamps = [_utc(int(float(r[0])), 3 * int(float(r[1])) - 2) for r in rows]
    columns = {name: [_number(r[i]) for r in rows] for i, name in enumerate(header) if i >= 2}
    return RawTable("QS", stamps, columns)


def _danish_data() -> RawTable:
    header, *rows = _read_rows("danish_data", "data.csv")
    stamps = [_utc(int(r[0][:4]), 3 * int(r[0][5]) - 2) for r in rows]  # "1974Q1"
    columns = {name: [_number(r[i]) for r in rows] for i, name in enumerate(header) if i >= 1}
    return RawTable("QS", stamps, columns)


READERS: dict[str, tuple[str, Callable[[], RawTable]]] = {
    "sunspots": ("sunspots.csv", _sunspots),
    "nile": ("nile.csv", _nile),
    "elnino": ("elnino.csv", _elnino),
    "elec_equip": ("elec_equip.csv", _elec_equip),
    "co2": ("co2.csv", _co2),
    "macrodata": ("macrodata.csv", _macrodata),
    "danish_data": ("data.csv", _danish_data),
}


def _complete(values: Sequence[float | None]) -> tuple[float, ...]:
    out = tuple(v for v in values if v is not None)
    assert len(out) == len(values), "the gap-free tail has no missing values"
    return out


def snapshot(dataset: str, columns: Sequence[tuple[str, str]]) -> SourceSnapshot:
    """Select ``(column, item_id)`` pairs from a packaged dataset.

    When a selected column has missing values, only the rows after the last missing one are
    kept (the gap-free tail): labels are never interpolated numbers.
    """
    filename, reader = READERS[dataset]
    table = reader()
    picked = [(item, table.columns[column]) for column, item in columns]
    missing = [i for _, values in picked for i, v in enumerate(values) if v is None]
    first = max(missing) + 1 if missing else 0
    selection = (
        "all rows"
        if not missing
        else (
            f"rows after the last missing value (gap-free tail; {len(missing)} missing values "
            "earlier in the record)"
        )
    )
    selection += "; columns " + ", ".join(f"{c} as {i}" for c, i in columns)
    series = {item: _complete(values[first:]) for item, values in picked}
    return SourceSnapshot(
        dataset=f"statsmodels.datasets.{dataset}",
        file=filename,
        freq=table.freq,
        selection=selection,
        timestamps=tuple(table.timestamps[first:]),
        series=series,
    )
