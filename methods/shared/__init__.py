"""Pieces several methods use, owned by none of them: methods import these, never each other's packages
(tests/test_layout.py), so adding or changing one method touches no other.

- trees/: the tree structures methods build (static template/built/auto trees, trees grown while drafting,
  Sequoia's tree); the engine's own Tree topology stays in bench/core/tree.py.
- draft_proposer.py: the base of the methods that draft with a separate draft model.
- lookahead.py: lookahead decoding (Jacobi window, n-gram pool), run on the target by `lookahead` and on the
  draft model by `ouroboros`.
- heads.py: drafting from extra heads on the target (Medusa's tree fill), used by `medusa`, `bpd` and `propd`.
"""
