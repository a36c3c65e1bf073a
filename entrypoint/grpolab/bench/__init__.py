"""Benchmark-only code, never imported by a run: the memory benchmark's cases and plain TRL on the lab's settings."""
