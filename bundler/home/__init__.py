"""Data homes: resolution, volumes, skills, backup, restore, zip checks."""
