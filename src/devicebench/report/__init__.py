"""The `compare` report: read runs from the tracking store, pair them by config key, explain the speedups.

This package never imports torch: it reads what the workloads logged (tags, params, metrics) through
`MlflowClient`, so a report can be built on a laptop without a GPU stack, from any store the client reaches.
"""
