"""Errors of the sealed runner. Each reads as a fact about what went wrong."""

from __future__ import annotations


class RunnerError(Exception):
    """Base class: something the runner could not do."""


class BackendUnavailable(RunnerError):
    """The backend cannot run anything here (missing binary, cluster, permission)."""


class ImageNotPinned(RunnerError):
    """An image reference without ``@sha256:<64 hex>``: runs use digests only."""


class ImagePullFailed(RunnerError):
    """The image could not be pulled by digest, or what arrived does not match the digest."""


class ContainerStartFailed(RunnerError):
    """The runtime refused to create or start the sealed container."""


class HardwareClassUnservable(RunnerError):
    """The host cannot give this hardware class exactly (e.g. more CPUs than it has)."""


class NoCpuSlotFree(RunnerError):
    """Every exclusive cpuset this class could use is held by another run."""
