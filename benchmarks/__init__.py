"""Benchmark scripts: `python -m benchmarks.<name>`; they print what they measure."""
