"""Signed BenchmarkReports: scoring a run's log, archiving, signing, recomputing, keys."""
