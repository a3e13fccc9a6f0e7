"""Post-use & Pre-cut: a token cache reused at the draft and at the target (token_cache), a Q-learning
draft-length controller (precut), and the method that combines them on the draft-model machinery (proposer)."""
