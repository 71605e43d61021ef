"""The leaderboard: completed runs ranked per tier (and task), with provenance on every row."""
