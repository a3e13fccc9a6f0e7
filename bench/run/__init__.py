"""The runner: `python -m bench.run` (Hydra), prompts to records, the results store, metrics, provenance, W&B.

Kept import-light: reports import `bench.run.store` and `bench.metrics` without loading torch.
"""
