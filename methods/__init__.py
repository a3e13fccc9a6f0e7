"""Lazy method registry (lm-eval style): a name maps to "module:Class", imported only when used.

Adding a method = one module here + one conf/method/<name>.yaml whose `name` is the registry key.
"""

from __future__ import annotations

import importlib

REGISTRY = {
    "ar": "methods.ar:Autoregressive",
    "bpd": "methods.medusa.proposer:BPD",
    "dyspec": "methods.draft_model.dyspec:DySpec",
    "eagle": "methods.eagle.proposer:Eagle",
    "eagle2": "methods.eagle.proposer:Eagle2",
    "eagle3": "methods.eagle3.proposer:Eagle3",
    "hf_assisted": "methods.hf:HFAssisted",
    "hf_generate": "methods.hf:HFGenerate",
    "hf_pld": "methods.hf:HFPromptLookup",
    "holistic": "methods.holistic.proposer:Holistic",
    "lookahead": "methods.lookahead:Lookahead",
    "medusa": "methods.medusa.proposer:Medusa",
    "ouroboros": "methods.ouroboros:Ouroboros",
    "ouroboros_g12": "methods.ouroboros:Ouroboros",
    "propd": "methods.propd.proposer:ProPD",
    "pld": "methods.pld:PromptLookup",
    "rest": "methods.rest.proposer:Rest",
    "sd": "methods.draft_model.sd:SpeculativeDecoding",
    "sequoia": "methods.draft_model.sequoia:Sequoia",
    "specinfer": "methods.draft_model.specinfer:SpecInfer",
    "token_recycling": "methods.token_recycling.proposer:TokenRecycling",
}


class UnknownMethod(KeyError):
    pass


def method_class(name: str):
    if name not in REGISTRY:
        raise UnknownMethod(f"unknown method '{name}' (known: {', '.join(sorted(REGISTRY))})")
    module, cls = REGISTRY[name].split(":")
    return getattr(importlib.import_module(module), cls)


def build_method(cfg, bundle):
    return method_class(cfg.name)(cfg, bundle)
