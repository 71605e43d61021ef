"""Runs: one attempt at evaluating a submission (initial, rerun, determinism repeat), with a
timeline of platform-stamped events. A run never mutates an earlier run."""
