"""Scoring: metrics, the per-task scorer, the capability vector. Pure functions over data."""

SCORER_VERSION = "future-ts-scorer/1"
