"""Verdicts on pods, from the offline rule engine or a real API server: `check-pod` as a library."""
