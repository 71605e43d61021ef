from app.errors import TooManyRequests


class QuotaExceeded(TooManyRequests):
    """Carries ``Retry-After`` and the ``X-Quota-*`` headers."""
