"""Operational tools and benchmarks: replay, benchmarks."""
