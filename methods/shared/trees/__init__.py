"""The one home of the tree structures methods build (the engine's Tree itself is bench/core/tree.py):

- static.py: trees fixed before decoding, from node paths (template) or from measured per-rank acceptance
  (built, auto); Token Recycling, Medusa and ProPD draft them.
- draft.py: trees grown node by node while drafting (DraftTree, Trie) and their conversion to the engine's Tree.
- sequoia.py: Sequoia's hardware-aware tree shape from a measured positional acceptance vector.
"""
