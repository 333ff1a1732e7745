"""Helpers with no opinion about benchmarks: a quantile, redaction of secrets, capped YAML, child
processes. Layer 0 with `errors` and `schema`: they import nothing else of devicebench."""
