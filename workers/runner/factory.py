"""Choosing the runner backend from settings (``FUTURE_TS_RUNNER_BACKEND``).

``auto`` picks podman when it is installed and answers, else the dev-only process backend (which
warns loudly that its runs are ``local_sealed_mvp``). Production settings refuse ``process``.
"""

from __future__ import annotations

from pathlib import Path

from app.settings import Settings
from workers.runner.kubernetes import KubernetesBackend
from workers.runner.podman import PodmanBackend
from workers.runner.port import RunnerBackend
from workers.runner.process import ProcessBackend


def backend_from_settings(settings: Settings, process_cwd: Path | None = None) -> RunnerBackend:
    """The backend the settings ask for; ``process_cwd`` is where process commands run."""
    choice = settings.runner_backend
    if choice == "kubernetes":
        return KubernetesBackend(
            stderr_dir=(settings.data_dir / "runner" / "kubernetes" / "stderr").resolve(),
            stderr_cap_bytes=settings.stderr_cap_bytes,
        )
    if choice == "process":
        return ProcessBackend.from_settings(settings, cwd=process_cwd)
    podman = PodmanBackend.from_settings(settings)
    if choice == "podman" or podman.available():
        return podman
    return ProcessBackend.from_settings(settings, cwd=process_cwd)
