"""A plan of many runs: its YAML read and checked whole (spec), the contract a suite hands each child
process (handoff) and the suite that runs them and then the report (suite). Layer 7: above report."""
