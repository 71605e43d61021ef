"""Warning categories of the service.

``DevOnlyWarning`` is raised when a part that is only fit for development is built (the local
directory store, generated dev keys, the process runner backend). It is the only warning the test
suite ignores.
"""

from __future__ import annotations


class DevOnlyWarning(UserWarning):
    """A dev-only implementation was selected; it lacks a production guarantee."""
