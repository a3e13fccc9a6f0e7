"""The draft-model family: sd, specinfer, sequoia (tree DP), dyspec, on the shared draft-model base
(methods/shared/draft_proposer.py)."""
