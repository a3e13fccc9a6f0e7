"""A dynamic tree whose device index tensors are computed on the device from its parents, not sent there.

EAGLE-2 and EAGLE-3 choose their trees on the device (methods/shared/feature_head.py). The host needs the parents
once (one read) to build the Tree (its shape and levels); `Tree.on` would then send the index tensors back in one
more copy. `tree_on_device` computes them from the parents still on the device instead, so a draft costs one host
wait. The tensors equal what `Tree.on` builds on the host (tests/test_eagle.py checks it).
"""

from __future__ import annotations

import dataclasses

import torch

from bench.core.tree import DeviceTree, Tree, tree_from_parents


@dataclasses.dataclass(frozen=True, eq=False)
class TreeOnDevice(Tree):
    """A Tree whose index tensors on one device were computed there (`tree_on_device`)."""

    device_tree: DeviceTree | None = None

    def on(self, device: torch.device | str) -> DeviceTree:
        built = self.device_tree.parents.device
        asked = torch.device(device)
        if asked.type == built.type and asked.index in (None, built.index):
            return self.device_tree
        return super().on(device)


def tree_on_device(parents: torch.Tensor) -> TreeOnDevice:
    """The Tree of draft nodes 1..N whose parents' slots are `parents` [N] (breadth first, on the device): read
    once for the host's Tree, its index tensors computed where `parents` is."""
    host = tree_from_parents([-1, *parents.tolist()])  # the draft's one host read
    fields = {f.name: getattr(host, f.name) for f in dataclasses.fields(Tree) if f.init and not f.name.startswith("_")}
    return TreeOnDevice(**fields, device_tree=index_tensors(host, parents))


def index_tensors(host: Tree, parents: torch.Tensor) -> DeviceTree:
    """Tree.on's tensors from the device's parents; only shapes (depth, most children) come from `host`."""
    dev, n1 = parents.device, host.size + 1
    par = torch.cat([parents.new_zeros(1), parents])  # the root's parent clamped to 0, as Tree.on has it
    slots = torch.arange(n1, device=dev)
    itself = torch.eye(n1, dtype=torch.bool, device=dev)
    ancestors = itself
    for _ in range(host.max_depth):  # each pass adds one generation: a node's ancestors are its parent's and it
        ancestors = itself | ancestors[par]
    depth = ancestors.sum(1) - 1
    # path_slots[i, d]: i's ancestor at depth d (0, the root, past i's own depth)
    at_depth = depth[None, :, None] == torch.arange(host.max_depth + 1, device=dev)
    path_slots = ((ancestors[:, :, None] & at_depth) * slots[None, :, None]).sum(1)
    # children[i, r]: i's r-th child in slot order (0 past its last): a node's rank = its earlier siblings
    width = max(1, *(len(c) for c in host.children))
    is_child = par[None, 1:] == slots[:, None]  # [N+1, N]: node j+1 is a child of i
    rank = is_child.cumsum(1)[par[1:], slots[:-1]] - 1
    children = torch.zeros(n1, width, dtype=torch.long, device=dev)
    children[par[1:], rank] = slots[1:]
    return DeviceTree(par, depth, ancestors, path_slots, children, slots)
