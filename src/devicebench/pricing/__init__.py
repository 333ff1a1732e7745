"""What an hour of a machine costs (prices: the table and its lookup) and what a run cost (costs).
Layer 2: imports config and layer 0; torch-free, so the report reads the same prices the runs logged."""
