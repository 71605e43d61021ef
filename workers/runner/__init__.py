"""The sealed runner: backends that start a model sealed, and the forward-protocol driver.

* ``port.py``: the ``RunnerBackend`` / ``SealedProcess`` port, ``SealedSpec``, ``ImageRecord``.
* ``podman.py`` (production, one host), ``kubernetes.py`` (a Job per task; needs a cluster),
  ``process.py`` (dev-only MVP), ``factory.py`` (choice by settings).
* ``forward.py``: ``drive_task`` speaks ``future-ts-forward/1``; ``derive_seed``;
  ``determinism.py``: the fresh-container probe.
* ``slots.py``: exclusive cpusets per hardware class; ``cgroup.py``: memory telemetry.
"""
