"""Catalog ``future-ts-v1``: eight forecasting tasks on real public series shipped by statsmodels.

Every series here is historical and has been public for years (statsmodels has shipped these
files since at least 2014), so a model could have seen any of it in training. That is why:

* the label of every window carries its historical ``available_at`` time (the end of the last
  target period plus a per-task publication delay), and future-only ranking excludes every
  window whose label was public when the model was frozen;
* the ``live`` tier is a **rehearsal**. The data is historical; only the release schedule of the
  last windows' labels is set in the future (``rehearsal_release``), so that the platform's
  live-tier mechanics (sealed runs, held labels, future-only ranking) can be exercised
  end to end. A rehearsal ranking says nothing about genuine future skill, because the held
  values are public elsewhere. A real live wave needs data that does not exist yet.

The snapshot ids are pinned: if a statsmodels release ever changes these numbers, building the
catalog fails with ``CatalogDrift`` and a new catalog version must be cut.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.catalog.cards import Tier

QUANTILE_LEVELS: tuple[float, ...] = tuple(k / 10 for k in range(1, 10))
METRICS: tuple[str, ...] = ("mase", "smape", "wql", "interval_coverage")
STATSMODELS_PINNED = "statsmodels 0.15.0"  # the release the snapshot ids below were taken from


@dataclass(frozen=True)
class TaskSpec:
    task_id: str
    tier: Tier
    title: str
    dataset: str  # key of app.catalog.sources.READERS
    columns: tuple[tuple[str, str], ...]  # (packaged column, item_id)
    horizon: int
    n_windows: int
    seasonality: int
    context_length: int
    publication_delay_days: int  # after the end of the last target period
    latency_ms: float
    wall_clock_s: float
    licence: str
    provenance: str  # the original publisher, as statsmodels documents it
    snapshot_id: str  # pinned; see CatalogDrift
    rehearsal_release: tuple[str, ...] = ()  # live rehearsal: release times of the last windows
    hardware_class: str = "cpu-1c-1g"
    memory_mb: int = 1024
    max_latency_violation_pct: float = 10.0
    startup_s: float = 120.0
    requires_pretraining_manifest: bool = True

    @property
    def step(self) -> int:
        """Rolling origins move by a whole horizon, so the windows' labels never overlap."""
        return self.horizon


def _pd(copyright_line: str) -> str:
    return (
        f"{copyright_line} (statsmodels dataset COPYRIGHT notice); the statsmodels package is "
        "BSD-3-Clause"
    )


SPECS: tuple[TaskSpec, ...] = (
    TaskSpec(
        task_id="sunspots-yearly",
        tier="public_dev",
        title="Yearly mean sunspot number, 11-year solar cycle",
        dataset="sunspots",
        columns=(("sunactivity", "sunactivity"),),
        horizon=11,
        n_windows=6,
        seasonality=11,
        context_length=200,
        publication_delay_days=31,
        latency_ms=5000,
        wall_clock_s=300,
        licence=_pd("This data is public domain."),
        provenance="NOAA National Geophysical Data Center, yearly sunspot numbers",
        snapshot_id="sha256:fb18b0955e931395cfecfed9d111e809ad1e7ef8491ada2e72ea024b4f24c8d4",
        requires_pretraining_manifest=False,
    ),
    TaskSpec(
        task_id="elnino-nino12-monthly",
        tier="public_dev",
        title="Monthly sea surface temperature, Nino 1+2 region",
        dataset="elnino",
        columns=(("nino12", "nino12"),),
        horizon=12,
        n_windows=8,
        seasonality=12,
        context_length=300,
        publication_delay_days=7,
        latency_ms=5000,
        wall_clock_s=300,
        licence=_pd("This data is in the public domain."),
        provenance="NOAA National Weather Service, ERSST.V3B, Nino 1+2",
        snapshot_id="sha256:3b38ed17bc78242b5be611c27ecc17c784680225f1faa12e86c4bc83395c1721",
        requires_pretraining_manifest=False,
    ),
    TaskSpec(
        task_id="danish-money-quarterly",
        tier="public_dev",
        title="Danish money demand: log real money, income, prices, bond and deposit rates",
        dataset="danish_data",
        columns=(("lrm", "lrm"), ("lry", "lry"), ("lpy", "lpy"), ("ibo", "ibo"), ("ide", "ide")),
        horizon=4,
        n_windows=4,
        seasonality=4,
        context_length=39,
        publication_delay_days=90,
        latency_ms=5000,
        wall_clock_s=300,
        licence=_pd("This is public domain."),
        provenance="Johansen and Juselius (1990), Danish money demand data",
        snapshot_id="sha256:574e8bbac3e230663f7f97a9c063507abc64d0d3297b6d8e5efb2e50b6bc18f5",
        requires_pretraining_manifest=False,
    ),
    TaskSpec(
        task_id="nile-yearly",
        tier="blind_archive",
        title="Yearly flow volume of the Nile at Aswan",
        dataset="nile",
        columns=(("volume", "volume"),),
        horizon=5,
        n_windows=6,
        seasonality=1,
        context_length=70,
        publication_delay_days=90,
        latency_ms=5000,
        wall_clock_s=300,
        licence=_pd("This is public domain."),
        provenance="Cobb (1978); Durbin and Koopman, Nile river flows at Aswan",
        snapshot_id="sha256:f9ad24ec40edb2dac31eb6ca134bf9ccaec25ac4589760fbedb077c00bfa1eb7",
    ),
    TaskSpec(
        task_id="elec-equip-monthly",
        tier="blind_archive",
        title="Euro area turnover index, manufacture of electrical equipment",
        dataset="elec_equip",
        columns=(("STS.M.I7.W.TOVT.NS0016.4.000", "turnover"),),
        horizon=12,
        n_windows=6,
        seasonality=12,
        context_length=180,
        publication_delay_days=60,
        latency_ms=5000,
        wall_clock_s=300,
        licence=_pd("This is public domain.") + "; original data Eurostat (reuse with attribution)",
        provenance="Eurostat short-term statistics, working-day adjusted, not seasonally adjusted",
        snapshot_id="sha256:abb1c08423617579b7fbf3ee4ed1b69420bfd5f36079ed87395f981350107d1d",
    ),
    TaskSpec(
        task_id="us-macro-real-quarterly",
        tier="blind_archive",
        title="US real GDP, consumption, investment, government spending, disposable income",
        dataset="macrodata",
        columns=(
            ("realgdp", "realgdp"),
            ("realcons", "realcons"),
            ("realinv", "realinv"),
            ("realgovt", "realgovt"),
            ("realdpi", "realdpi"),
        ),
        horizon=8,
        n_windows=6,
        seasonality=4,
        context_length=120,
        publication_delay_days=30,
        latency_ms=8000,
        wall_clock_s=300,
        licence=_pd("This is public domain."),
        provenance="Federal Reserve Bank of St. Louis FRED (compiled by statsmodels)",
        snapshot_id="sha256:f9703cfa8fb8931ee35f9e0cd277e7de197890815423c2c7dcd8741168fc3936",
    ),
    TaskSpec(
        task_id="co2-weekly",
        tier="live",
        title="Mauna Loa weekly atmospheric CO2 (live-tier rehearsal)",
        dataset="co2",
        columns=(("co2", "co2"),),
        horizon=13,
        n_windows=8,
        seasonality=52,
        context_length=312,
        publication_delay_days=7,
        latency_ms=8000,
        wall_clock_s=300,
        licence=_pd("This is public domain."),
        provenance="Scripps Institution of Oceanography flask samples via CDIAC",
        snapshot_id="sha256:9cbd0221c34c48cd152d70f48e4bdee3f8c4ff3bad5a2e37fd57183a3a2b7abb",
        rehearsal_release=(
            "2027-01-09T00:00:00Z",
            "2027-02-06T00:00:00Z",
            "2027-03-06T00:00:00Z",
            "2027-04-03T00:00:00Z",
        ),
    ),
    TaskSpec(
        task_id="us-macro-rates-quarterly",
        tier="live",
        title="US T-bill rate, unemployment, inflation, CPI (live-tier rehearsal)",
        dataset="macrodata",
        columns=(("tbilrate", "tbilrate"), ("unemp", "unemp"), ("infl", "infl"), ("cpi", "cpi")),
        horizon=4,
        n_windows=8,
        seasonality=4,
        context_length=120,
        publication_delay_days=15,
        latency_ms=8000,
        wall_clock_s=300,
        licence=_pd("This is public domain."),
        provenance="FRED and the US Bureau of Labor Statistics (compiled by statsmodels)",
        snapshot_id="sha256:69978660a007f0498b70629f36df994b174976815d318babf3828f6c7f0ab5e0",
        rehearsal_release=(
            "2027-01-15T00:00:00Z",
            "2027-04-15T00:00:00Z",
            "2027-07-15T00:00:00Z",
            "2027-10-15T00:00:00Z",
        ),
    ),
)

SMOKE_SUITE: tuple[str, ...] = ("danish-money-quarterly", "nile-yearly", "us-macro-rates-quarterly")
