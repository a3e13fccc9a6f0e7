"""The engine core: the proposer contract, the one decode loop, trees, verifiers, KV compaction, timing.

It imports nothing from `methods/`, the runner (`bench.run`) or the reports (`bench.report`).
"""
