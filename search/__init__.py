"""Strategy search over the constrained space (Optuna). Arrives with the search issue."""
