"""Intake: what a model author asked for. A submission never changes what it asked; runs carry
what happened."""
