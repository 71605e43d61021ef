"""Public task cards and hardware classes (never labels)."""
