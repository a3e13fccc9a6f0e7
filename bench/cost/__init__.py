"""The cost model: what one target forward costs on a machine (profiles.py: T(n, context) from a roofline or a
measurement) and a run's recorded steps replayed on it (replay.py). Pure: numpy and data files, no torch, so the
reports import it; docs/cost_model.md."""
