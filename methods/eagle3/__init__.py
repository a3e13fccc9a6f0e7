"""EAGLE-3 drafting from a fused-feature head (methods/eagle3/proposer.py)."""
