"""Per-author quotas: submissions per rolling 24 hours and runs in flight.

Counted from the ``submissions`` and ``runs`` tables at the moment of the check, never from a
separate counter, so nothing can drift: a cancelled run or a run that failed with
``platform_error`` simply stops counting (that is the refund). Staff are exempt.
"""
