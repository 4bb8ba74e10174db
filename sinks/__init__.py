"""Exactly-once sinks built on a two-phase-commit template (see the issues that add them)."""
