"""Runs read back from the tracking store as plain, frozen records (`RunRecord`), and nothing else:
the first stage of the report, the only one that talks to MLflow."""
