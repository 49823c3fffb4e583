"""Loopback fakes of outside services for tests, benchmarks and local runs (real HTTP, no patching)."""
