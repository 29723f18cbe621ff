"""Read models of the event log, one module per model, and the ranker."""
