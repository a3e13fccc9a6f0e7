"""Sequoia (Chen et al. 2024): a static tree shape from Sequoia's search over a measured acceptance vector
and, with `size: auto`, this machine's measured target/draft cost (methods/shared/trees/sequoia.py);
children are drawn *without* replacement (the draft's top-k at temperature 0); Sequoia's verification rule.
The shape is chosen once per target temperature (the acceptance vector depends on it) and cached on disk."""

from __future__ import annotations

import torch

from bench.core.settings import TEXT, declare, integer, integers
from bench.core.tree import tree_from_paths
from bench.errors import ConfigError
from bench.paths import project_path
from methods.shared.draft_proposer import DraftModelProposer
from methods.shared.trees import sequoia as sequoia_tree
from methods.shared.trees.draft import ROOT


class Sequoia(DraftModelProposer):
    rule = "sequoia"
    settings = declare({
        "size": integer(1, words=("auto",)), "sizes": integers(1), "width": integer(1), "max_depth": integer(1),
        "forward_cost_dir": TEXT, "calibration.dataset": TEXT, "calibration.limit": integer(1),
        "calibration.tokens": integer(1), "calibration.data_mirror": TEXT, "calibration.data_cache": TEXT,
        "calibration.cache_dir": TEXT,
    })

    def __init__(self, cfg, bundle):
        super().__init__(cfg, bundle)
        self.width, self.max_depth = int(cfg.width), int(cfg.max_depth)
        sizes = [int(s) for s in cfg.sizes] if cfg.size == "auto" else [int(cfg.size)]
        self.max_nodes = max(sizes)
        self.shape_for: dict[float, tuple] = {}  # temperature -> (children counts per rank path, info)

    @property
    def draft_name(self) -> str:
        return self.bundle.draft_label()

    def describe(self):
        info = {f"T{t:g}": {"tree": tree_from_paths(paths).name, "paths": paths, **extra}
                for t, (_, paths, extra) in self.shape_for.items()}
        return {**super().describe(), "size": str(self.cfg.size), "width": self.width, "trees": info}

    def _shape(self, temperature: float):
        if temperature not in self.shape_for:
            cfg = self.cfg
            acc = sequoia_tree.load_or_measure_acceptance(
                self.bundle, self.draft, self.draft_name, temperature, self.draft_temperature, self.width,
                cfg.calibration)
            if cfg.size == "auto":
                from bench.models import forward_cost

                curve = forward_cost.load_or_measure(self.bundle, project_path(cfg.forward_cost_dir))
                draft_ms = sequoia_tree.draft_cost_ms(self.draft, self.draft_name, self.bundle, cfg.forward_cost_dir)
                paths, info = sequoia_tree.choose_size(acc, cfg.sizes, self.max_depth,
                                                       lambda n: forward_cost.cost_at(curve, n), draft_ms)
            else:
                paths, info = sequoia_tree.shape(acc, int(cfg.size), self.max_depth), {}
            counts: dict[tuple, int] = {}
            for p in paths:  # number of children of each node, by its rank path
                counts[tuple(p[:-1])] = counts.get(tuple(p[:-1]), 0) + 1
            if max(counts.values()) > self.width:
                raise ConfigError("sequoia: tree wider than the measured acceptance vector")
            self.shape_for[temperature] = (counts, paths, {**info, "acceptance": [round(x, 4) for x in acc]})
        return self.shape_for[temperature][0]

    def start(self, prompt_ids):
        super().start(prompt_ids)
        self.counts = self._shape(self.ctx.temperature)

    def propose(self, seq, length):
        """The shape is static: draws stay on the device (placeholders in the host tree) and each level's parents
        are forwarded with their tokens from there, so a greedy step reads nothing. Sampled, a parent may have
        fewer tokens with probability than children: the step reads its draws once and drops those."""
        q_root = self.probs(self.catch_up(seq, length))
        level = [(ROOT, ())]  # (node id, rank path)
        qs, drawn = {}, []  # drawn: each parent's draws, in node order
        while level:
            parents = [(n, path) for n, path in level if path in self.counts]
            if not parents:
                break
            nodes = [n for n, _ in parents]
            if nodes[0] == ROOT:
                rows = [q_root]
            else:
                rows = list(map(self.probs, self.forward_shaped(nodes, torch.cat(drawn)[self.on_device(nodes)])))
            level = []
            for (node, path), q in zip(parents, rows):
                if node != ROOT:
                    qs[node] = q
                drawn.append(self.draws(q, self.counts[path], replacement=False))
                level += [(self.tree.add(node, 0), (*path, rank)) for rank in range(len(drawn[-1]))]
        if self.greedy:  # top-k: never a dropped draw
            return self.finish(q_root, qs, tokens=torch.cat(drawn))
        return self.finish(q_root, self.keep_drawn(torch.cat(drawn).tolist(), qs))
