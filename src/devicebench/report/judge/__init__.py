"""The verdicts: small pure rules over the model's records that say why a speedup is what it is.
Reads `model/`; adds nothing to its records (a `Judgement` holds the lines beside them)."""
