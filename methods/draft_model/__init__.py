"""The draft-model family: a shared draft-tree proposer and sd, specinfer, sequoia (tree DP), dyspec."""
