from app.errors import Conflict, NotFound


class RunNotFound(NotFound):
    pass


class ReportNotFound(NotFound):
    pass


class RunAlreadyTerminal(Conflict):
    pass
