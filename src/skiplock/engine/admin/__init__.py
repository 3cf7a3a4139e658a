"""The admin side of an engine: jobs, dead letters, counts, workers, health."""
