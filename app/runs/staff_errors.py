"""Errors of the staff run operations (reruns) and the run logs."""

from app.errors import Conflict, Forbidden, NotFound, ServiceUnavailable, Unprocessable


class RunInProgress(Conflict):
    """A rerun was asked while a run of the submission is not yet terminal."""


class HardwareClassUnknown(Unprocessable):
    pass


class LogRestricted(Forbidden):
    """stderr of blind_archive and live runs is shown to staff only."""


class LogNotAvailable(NotFound):
    """The run has no archived stderr (not finished yet, or it never started a container)."""


class ArchiveUnavailable(ServiceUnavailable):
    pass
