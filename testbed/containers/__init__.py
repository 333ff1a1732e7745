"""`make test-containers`: the images built as shipped and the compose stack run end to end (python -m testbed.containers)."""
