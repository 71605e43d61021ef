"""Principals, bearer tokens (stored hashed) and roles."""
