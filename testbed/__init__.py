"""Real local servers that the tests and the benchmarks start (never shipped with the package)."""
