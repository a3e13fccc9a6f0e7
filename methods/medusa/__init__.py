"""Drafts from Medusa heads on the target's last hidden state: Medusa-1 (a static tree) and blockwise parallel
decoding (a chain of each head's top-1). See proposer.py."""
