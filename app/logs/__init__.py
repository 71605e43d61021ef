"""Run logs: the archived, size-capped stderr of a run (``runs/<run_id>/stderr.log``).

A ``blind_archive``/``live`` run's stderr could carry blind context out, so it is shown to staff
only (and each staff read of one is audited); a ``public_dev`` run's goes to its author too.
Readers never see logs.
"""
