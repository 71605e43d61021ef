"""Audit trail: every staff action and every state change, with actor, time and reason."""
