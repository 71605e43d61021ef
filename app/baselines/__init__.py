"""Baseline forecasters. Standard library only: these files are copied into the baseline model
images as they are, and the scorer imports the same code, so a sealed run of a baseline image can
be checked number for number against a direct computation."""
