"""Push: a submission's status and its runs' state changes as Server-Sent Events.

The stream polls the database (every ``sse_poll_interval_s``) with a short session per poll, so
it works across API and worker processes with no broker in between, and emits only what changed.
Each run event carries ``id: <run_events.id>``, so a client that reconnects with
``Last-Event-ID`` gets exactly what it missed.
"""
