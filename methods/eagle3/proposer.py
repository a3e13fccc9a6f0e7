"""EAGLE-3 (Li et al. 2025): EAGLE-2's dynamic tree (methods/shared/feature_head.py) over an EAGLE-3 head
(bench/models/eagle3.py).

The proposer asks the engine for the input states of the head's three target layers (`feature_layers`: low, mid,
high), which the target's verification forward hands over for the committed positions with no extra forward; the
head fuses them, drafts over its reduced vocabulary, and its top-k indices become target ids through `d2t`. The
tree is EAGLE-2's (the official EAGLE-3 code draws it the same way, at depth 8).

The head is the model config's `eagle3` block (ModelBundle.load_eagle3): `trained` (`make eagle3`), `path`, `hub`
(the published heads), or `init`, an untrained one (seeded, whole vocabulary): lossless, MAT near 1.
"""

from __future__ import annotations

from methods.shared.feature_head import DynamicTreeProposer


class Eagle3(DynamicTreeProposer):
    def load_head(self, bundle):
        head = bundle.load_eagle3()
        self.feature_layers = head.layers  # per instance: the layers depend on the head and its target
        return head

    def draft_tokens(self, indices):
        return self.head.to_target(indices)

    def describe(self):
        return {**super().describe(), "feature_layers": list(self.feature_layers),
                "draft_vocab": int(self.head.d2t.numel())}
