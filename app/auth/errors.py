from app.errors import Forbidden, NotAuthenticated


class TokenMissing(NotAuthenticated):
    pass


class TokenInvalid(NotAuthenticated):
    pass


class RoleNotAllowed(Forbidden):
    pass
