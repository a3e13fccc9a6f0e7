"""EAGLE-1/EAGLE-2 drafting from a feature-level head (methods/eagle/proposer.py)."""
