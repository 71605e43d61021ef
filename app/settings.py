"""The one typed settings object. No other module reads ``os.environ``.

Every value comes from a ``FUTURE_TS_*`` environment variable (or a ``.env`` file). The embedded
defaults run everything on one machine with no server installed; ``environment=production``
refuses placeholder secrets and dev-only parts.
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

PLACEHOLDER_SECRETS = frozenset({"", "change-me", "minioadmin", "secret", "password"})


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="FUTURE_TS_", env_file=".env", extra="ignore")

    environment: Literal["dev", "test", "production"] = "dev"
    data_dir: Path = Path(".data")
    public_base_url: str = "http://127.0.0.1:8000"

    # Database: SQLite file under data_dir when unset.
    database_url: str | None = None
    # Celery broker: a filesystem queue under data_dir when unset (needs no server).
    broker_url: str | None = None

    # Archive store.
    store: Literal["local", "s3"] = "local"
    s3_endpoint_url: str | None = None
    s3_bucket: str = "future-ts-archive"
    s3_region: str = "us-east-1"
    s3_access_key: SecretStr = SecretStr("")
    s3_secret_key: SecretStr = SecretStr("")
    object_lock_mode: Literal["GOVERNANCE", "COMPLIANCE"] = "GOVERNANCE"
    object_lock_days: int = Field(default=365, ge=1)

    # Sealed runner.
    runner_backend: Literal["auto", "podman", "process", "kubernetes"] = "auto"
    podman_path: str = "podman"
    containers_conf: Path | None = None
    registry_insecure_hosts: list[str] = Field(default_factory=lambda: ["127.0.0.1:5000"])
    registry_timeout_s: float = 5.0
    artifact_allowed_hosts: list[str] = Field(default_factory=list)
    artifact_max_bytes: int = 2 * 1024**3
    stderr_cap_bytes: int = 1024 * 1024
    worker_cpus: str | None = None  # e.g. "0-1"; default: every CPU the worker may use

    # Signing keys (Ed25519, PEM PKCS#8). Dev generates them under data_dir/keys.
    report_key_path: Path | None = None
    log_key_path: Path | None = None
    report_key_pem: SecretStr | None = None
    log_key_pem: SecretStr | None = None
    log_origin: str = "future-ts.local/run"

    # Catalog.
    catalog_version: str = "future-ts-v1"

    # Client commands (future-ts submit / status).
    api_url: str = "http://127.0.0.1:8000"
    token: SecretStr | None = None

    # Operations.
    # No stuck runs (workers/maintenance.py): a run whose worker has not beaten for this long
    # is requeued (platform fault); a queued run unclaimed for this long has its token re-sent.
    reaper_heartbeat_timeout_s: float = Field(default=90.0, gt=0)
    requeue_after_s: float = Field(default=300.0, ge=0)

    quota_submissions_per_day: int = 50
    # Runs not yet terminal (queued or executing) per author; staff reruns do not count.
    quota_runs_in_flight: int = 8
    max_body_bytes: int = 1024 * 1024
    webhook_secret: SecretStr = SecretStr("")
    # Retry-After for a refused submission when the runs-in-flight quota is the limit (a run's
    # end cannot be predicted; the daily quota's Retry-After is exact).
    quota_in_flight_retry_after_s: int = Field(default=60, ge=1)
    # Webhooks: https to public addresses only, except these host[:port] (dev and tests only;
    # production refuses any).
    webhook_insecure_hosts: list[str] = Field(default_factory=list)
    webhook_max_attempts: int = Field(default=8, ge=1, le=20)
    webhook_backoff_base_s: float = Field(default=10.0, gt=0)
    webhook_timeout_s: float = Field(default=10.0, gt=0)
    # Server-Sent Events: database poll interval, heartbeat comment interval, longest stream
    # (the client reconnects with Last-Event-ID).
    sse_poll_interval_s: float = Field(default=0.5, gt=0)
    sse_ping_s: float = Field(default=15.0, gt=0)
    sse_max_stream_s: float = Field(default=3600.0, gt=0)
    # GET /metrics: run durations and prediction latencies cover runs finished this recently.
    metrics_window_s: int = Field(default=3600, ge=60)

    @model_validator(mode="after")
    def _refuse_placeholders_in_production(self) -> Settings:
        if self.environment != "production":
            return self
        problems = []
        if self.database_url is None or self.database_url.startswith("sqlite"):
            problems.append("FUTURE_TS_DATABASE_URL must name a PostgreSQL database")
        if self.broker_url is None or not self.broker_url.startswith("redis"):
            problems.append("FUTURE_TS_BROKER_URL must name a Redis broker")
        if self.store != "s3":
            problems.append("FUTURE_TS_STORE must be s3 (the local store is not write-once)")
        if self.s3_secret_key.get_secret_value() in PLACEHOLDER_SECRETS:
            problems.append("FUTURE_TS_S3_SECRET_KEY is a placeholder")
        if self.report_key_path is None and self.report_key_pem is None:
            problems.append("a report signing key must be configured")
        if self.log_key_path is None and self.log_key_pem is None:
            problems.append("a log signing key must be configured")
        if self.runner_backend == "process":
            problems.append("the process backend is dev-only")
        if self.webhook_insecure_hosts:
            problems.append("FUTURE_TS_WEBHOOK_INSECURE_HOSTS is for dev and tests only")
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @property
    def resolved_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.data_dir / 'future-ts.sqlite3').resolve()}"

    @property
    def resolved_broker_url(self) -> str:
        return self.broker_url or "filesystem://"

    @property
    def broker_folder(self) -> Path:
        return (self.data_dir / "broker").resolve()

    @property
    def local_store_dir(self) -> Path:
        return (self.data_dir / "archive").resolve()

    @property
    def keys_dir(self) -> Path:
        return (self.data_dir / "keys").resolve()


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()


def process_environment() -> dict[str, str]:
    """The environment, for modules that must pass it to a child process (podman, celery)."""
    return dict(os.environ)
