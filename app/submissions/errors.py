from app.errors import Conflict, NotFound, Unprocessable


class SubmissionNotFound(NotFound):
    pass


class IdempotencyKeyReused(Conflict):
    pass


class SubmissionInvalid(Unprocessable):
    error_name = "invalid_submission"


class ArtifactUriRejected(Unprocessable):
    error_name = "artifact_uri_rejected"


class SubmissionAlreadyTerminal(Conflict):
    pass


class InvalidCursor(Unprocessable):
    pass
