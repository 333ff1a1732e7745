"""What the runs say, as frozen records each built complete in one place: sides (the repeats of one
config on one device), their cost, pairs (two sides of one config, with the best CPU and the cost
decided as the pair is made), crossover grids, scaling series, regressions, and the `Comparison`
that holds them. Reads `read/`; never MLflow, never torch, never a spelling of a figure."""
