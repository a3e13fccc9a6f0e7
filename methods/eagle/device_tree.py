"""EAGLE-2's dynamic tree on the device now lives in methods/shared/device_tree.py (EAGLE-3 drafts it too); this
name stays for the callers that import it from here."""

from methods.shared.device_tree import TreeOnDevice, index_tensors, tree_on_device

__all__ = ["TreeOnDevice", "index_tensors", "tree_on_device"]
