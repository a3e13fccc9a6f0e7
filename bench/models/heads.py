"""Medusa-1 heads (Cai et al. 2024): extra next-next-token heads on the target's final hidden state.

Head i (0-based) reads the final (normed) hidden state at position t and predicts token t+2+i; the target's
own lm_head predicts t+1. Each head is a residual SiLU block `x + SiLU(W x + b)` (W and b zero-initialised, so an
untrained head equals the lm_head exactly; Medusa zeroes W only and leaves b at nn.Linear's random init, an
identity up to SiLU(b)) followed by a vocabulary projection: the target's frozen lm_head shared by all heads (the
legacy Medusa variant; cheap on CPU) or a per-head copy (the released checkpoints).

Where heads come from (a model config's `heads` block, loaded by `ModelBundle.load_heads()` through `load_heads`):
- `trained`: data/cache/heads/<id>/ (beside the model cache), written by `make heads` (scripts/train_heads.py,
  bench/train/heads.py): `heads.safetensors` (the blocks, and the projections if not shared),
  `heads.json` (num_heads, num_layers, shared_lm_head, hidden, vocab) and `heads_report.json`.
- `hub`: a repo holding Medusa's `medusa_lm_head.pt` (e.g. FasterDecoding/medusa-vicuna-7b-v1.3), a state dict
  `{h}.{l}.linear.weight|bias` (block l of head h) and `{h}.{num_layers}.weight` (its projection). The head and
  layer counts are read from the keys, never from the repo's config (released configs disagree with the weights),
  and the load is strict (Medusa's own `strict=False` hides a wrong count).
- `path`: a local folder of either kind, or a `.pt` file of the hub kind.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import torch
from torch import nn

from bench.cachefile import CorruptCache, load_or_fail, reason
from bench.errors import HarnessError
from bench.models.built import recipe_differs, report_digest
from bench.models.identity import hub_revision

WEIGHTS = "heads.safetensors"
CONFIG = "heads.json"
REPORT = "heads_report.json"  # written by bench/train/heads.py
EARLY_REPORT = "early_heads_report.json"  # by bench/train/early_heads.py
HUB_FILE = "medusa_lm_head.pt"


class ResBlock(nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.linear = nn.Linear(hidden, hidden)
        nn.init.zeros_(self.linear.weight)
        nn.init.zeros_(self.linear.bias)
        self.act = nn.SiLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.act(self.linear(x))


class MedusaHeads(nn.Module):
    """`forward(hidden [..., H]) -> logits [num_heads, ..., V]`."""

    def __init__(self, hidden: int, vocab: int, num_heads: int, lm_head: nn.Linear | None = None,
                 num_layers: int = 1):
        super().__init__()
        self.num_heads = num_heads
        self.num_layers = num_layers
        self.blocks = nn.ModuleList(nn.Sequential(*[ResBlock(hidden) for _ in range(num_layers)])
                                    for _ in range(num_heads))
        self.shared = lm_head is not None
        if self.shared:
            # Shared and frozen: kept out of this module's parameters and state dict (it is the target's).
            self.__dict__["lm_head"] = lm_head
            self.proj = None
        else:
            self.proj = nn.ModuleList(nn.Linear(hidden, vocab, bias=False) for _ in range(num_heads))

    @property
    def hidden_size(self) -> int:
        return self.blocks[0][0].linear.weight.shape[0]

    @property
    def vocab_size(self) -> int:
        return self.lm_head.out_features if self.shared else self.proj[0].out_features

    def head(self, i: int, hidden: torch.Tensor) -> torch.Tensor:
        """Logits [..., V] of head i alone (training runs the heads one at a time to bound memory)."""
        project = self.lm_head if self.shared else self.proj[i]
        return project(self.blocks[i](hidden)).to(hidden.device)

    def forward(self, hidden: torch.Tensor, num_heads: int | None = None) -> torch.Tensor:
        """Logits of the first `num_heads` heads (all by default). With the shared lm_head the heads' states
        go through it in ONE matmul: at decode time the 576 x 49152 projection is read from memory once per
        step instead of once per head (it dominates the heads' cost on a CPU). The shared lm_head is the target's:
        on a target split over devices it runs on the last one, so its logits come back to the heads' input's."""
        n = self.num_heads if num_heads is None else num_heads
        if self.shared:
            return self.lm_head(torch.stack([self.blocks[i](hidden) for i in range(n)])).to(hidden.device)
        return torch.stack([self.head(i, hidden) for i in range(n)])


def init_heads(lm_head: nn.Linear, num_heads: int, shared: bool = True, num_layers: int = 1) -> MedusaHeads:
    """Untrained heads for a target with this lm_head (its device and dtype): zero blocks, so every head's logits
    are the lm_head's. `shared`: the lm_head itself (frozen, outside the heads' state dict); else per-head copies
    of it (as Medusa initialises its projections), made without a random init of the vocabulary matrices."""
    hidden, vocab = lm_head.in_features, lm_head.out_features
    heads = MedusaHeads(hidden, vocab, num_heads, lm_head=lm_head, num_layers=num_layers)
    heads.to(device=lm_head.weight.device, dtype=lm_head.weight.dtype)
    if shared:
        return heads
    state = dict(heads.state_dict())
    state.update({f"proj.{i}.weight": lm_head.weight.detach().clone() for i in range(num_heads)})
    return from_state_dict(state, hidden, vocab, num_heads, num_layers)


def from_state_dict(state: dict, hidden: int, vocab: int, num_heads: int, num_layers: int,
                    lm_head: nn.Linear | None = None) -> MedusaHeads:
    """Heads built on the meta device and given `state`'s tensors (strict: a missing or extra key raises)."""
    with torch.device("meta"):  # a shared lm_head is only referenced, never created here
        heads = MedusaHeads(hidden, vocab, num_heads, lm_head, num_layers)
    heads.load_state_dict(state, strict=True, assign=True)
    return heads


# ------------------------------------------------------------------------------------------------------------
# Medusa's checkpoint (medusa_lm_head.pt)

HUB_KEY = re.compile(r"(\d+)\.(\d+)\.(linear\.weight|linear\.bias|weight)")


def from_medusa_state_dict(state: dict, what: str) -> MedusaHeads:
    """Per-head-projection heads from Medusa's state dict; counts and sizes come from the keys and shapes."""
    state = {k.removeprefix("medusa_head."): v for k, v in state.items()}
    ours, depth = {}, {}
    for key, value in state.items():
        m = HUB_KEY.fullmatch(key)
        if m is None:
            raise HarnessError(f"{what}: unexpected key '{key}' (Medusa heads have '<head>.<layer>.linear.weight', "
                               f"'<head>.<layer>.linear.bias' and '<head>.<num_layers>.weight')")
        h, layer, kind = int(m[1]), int(m[2]), m[3]
        if kind == "weight":  # the projection comes after the blocks
            depth[h] = layer
            ours[f"proj.{h}.weight"] = value
        else:
            ours[f"blocks.{h}.{layer}.{kind}"] = value
    num_heads = len(depth)
    if num_heads == 0 or sorted(depth) != list(range(num_heads)) or len(set(depth.values())) != 1:
        raise HarnessError(f"{what}: heads {sorted(depth)} with projections after blocks {sorted(set(depth.values()))}"
                           f": expected heads 0..n-1 with the same number of blocks")
    vocab, hidden = ours["proj.0.weight"].shape
    try:
        return from_state_dict(ours, hidden, vocab, num_heads, depth[0])
    except (RuntimeError, KeyError) as err:
        raise HarnessError(f"{what}: {reason(err)}") from None


def read_medusa_checkpoint(path: Path, what: str) -> MedusaHeads:
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 - a damaged pickle raises anything
        raise HarnessError(f"{what}: cannot read {path}: {reason(err)}") from None
    if not isinstance(state, dict):
        raise HarnessError(f"{what}: {path} holds a {type(state).__name__}, not a state dict")
    return from_medusa_state_dict(state, what)


def hub_checkpoint(repo: str, revision: str | None = None) -> Path:
    """Medusa's medusa_lm_head.pt of a hub repo (downloaded once into the HF cache), at `revision` if pinned."""
    from huggingface_hub import hf_hub_download

    try:
        return Path(hf_hub_download(repo_id=repo, filename=HUB_FILE, revision=revision))
    except Exception as err:  # noqa: BLE001 - offline, no such repo, no such file, network: all one line
        raise HarnessError(f"cannot get Medusa heads '{repo}' ({HUB_FILE}) from the hub: {reason(err)}") from None


# ------------------------------------------------------------------------------------------------------------
# our own folder (make heads)


def heads_dir(model_cache: str | Path) -> Path:
    """Trained heads live beside the model cache: data/cache/models -> data/cache/heads/<id>/."""
    return Path(model_cache).parent / "heads"


def save_heads(heads: MedusaHeads, folder: Path, extra: dict | None = None) -> None:
    """heads.safetensors + heads.json into `folder` (the caller makes it atomic: bench.cachefile.atomic_dir)."""
    from safetensors.torch import save_file

    state = {k: v.detach().contiguous().cpu() for k, v in heads.state_dict().items()}
    save_file(state, str(Path(folder) / WEIGHTS))
    config = {"num_heads": heads.num_heads, "num_layers": heads.num_layers, "shared_lm_head": heads.shared,
              "hidden": heads.hidden_size, "vocab": heads.vocab_size, **(extra or {})}
    (Path(folder) / CONFIG).write_text(json.dumps(config, indent=2) + "\n")


def read_heads_dir(path: Path, lm_head: nn.Linear | None) -> MedusaHeads:
    """The heads of a folder written by save_heads; a damaged folder raises CorruptCache (one line)."""
    from safetensors.torch import load_file

    config = json.loads((Path(path) / CONFIG).read_text())
    shared = bool(config["shared_lm_head"])
    if shared and lm_head is None:
        raise CorruptCache("the heads share the target's lm_head, but no lm_head was given")
    try:
        state = load_file(str(Path(path) / WEIGHTS))
        return from_state_dict(state, int(config["hidden"]), int(config["vocab"]), int(config["num_heads"]),
                               int(config["num_layers"]), lm_head if shared else None)
    except Exception as err:  # noqa: BLE001 - safetensors and load_state_dict raise their own types
        raise CorruptCache(reason(err)) from None


def read_trained(bundle, heads_id: str, what: str) -> MedusaHeads:
    """Heads `make heads` wrote for this target in data/cache/heads/<heads_id>/ (not there, or damaged: one line
    naming `make heads`)."""
    if bundle.model_cache is None:
        raise HarnessError(f"{what}: no model cache to find trained heads in")
    path = heads_dir(bundle.model_cache) / heads_id
    if not path.exists():
        raise HarnessError(f"heads '{heads_id}' are not built: run `make heads MODEL={bundle.name}` (looked in {path})")
    lm_head = bundle.model.get_output_embeddings()
    return load_or_fail(path, lambda p: read_heads_dir(p, lm_head), f"{what} ({path})",
                        f"`make heads MODEL={bundle.name}`")


def load_heads(bundle) -> MedusaHeads:
    """The heads named by `bundle.heads_cfg`, on the target's device and dtype, eval mode, frozen. `name` and
    `name_or_path` say which heads they are (recorded by the methods)."""
    cfg = bundle.heads_cfg
    if cfg is None:
        raise HarnessError(f"model '{bundle.name}' has no Medusa heads (set model.heads)")
    name = str(cfg.get("name") or cfg.id)
    revision = hub_revision(cfg, f"Medusa heads '{name}'").get("revision")
    lm_head = bundle.model.get_output_embeddings()
    if cfg.source == "trained":
        heads = read_trained(bundle, str(cfg.id), f"trained heads '{name}'")
    elif cfg.source == "hub":
        heads = read_medusa_checkpoint(hub_checkpoint(str(cfg.id), revision), f"Medusa heads '{cfg.id}'")
    elif cfg.source == "path":
        heads = heads_at_path(Path(str(cfg.id)), lm_head, f"heads '{name}'")
    else:
        raise HarnessError(f"unknown heads source '{cfg.source}' (known: trained, hub, path)")
    hidden, vocab = heads.hidden_size, heads.vocab_size
    if (hidden, vocab) != (lm_head.in_features, bundle.vocab_size):
        raise HarnessError(f"heads '{name}' are for hidden size {hidden} and vocabulary {vocab}, target "
                           f"'{bundle.name}' has {lm_head.in_features} and {bundle.vocab_size}")
    heads = heads.to(device=bundle.device, dtype=bundle.dtype).eval().requires_grad_(False)
    heads.name, heads.name_or_path = name, f"{cfg.source}:{cfg.id}"
    if cfg.source == "trained":  # recorded with its build's digest: heads trained again are other heads
        report = heads_dir(bundle.model_cache) / str(cfg.id) / REPORT
        differ = recipe_differs(report, cfg.get("train"), f"trained heads '{name}'", f"`make heads MODEL={bundle.name}`")
        heads.name_or_path += report_digest(report)
        heads.name_or_path += f" (built with another recipe: {', '.join(differ)})" if differ else ""
    return heads


def heads_at_path(path: Path, lm_head: nn.Linear, what: str) -> MedusaHeads:
    if path.is_dir() and (path / CONFIG).is_file():
        return load_or_fail(path, lambda p: read_heads_dir(p, lm_head), f"{what} ({path})", "`make heads`")
    checkpoint = path / HUB_FILE if path.is_dir() else path
    if not checkpoint.is_file():
        raise HarnessError(f"{what}: no {CONFIG} or {HUB_FILE} at '{path}'")
    return read_medusa_checkpoint(checkpoint, what)


def load_early_heads(bundle):
    """ProPD's early heads named by `bundle.early_heads_cfg` (bench/train/early_heads.py builds them): a heads
    folder whose heads.json also lists `layers`, the decoder layer each head reads."""
    cfg = bundle.early_heads_cfg
    if cfg is None:
        raise HarnessError(f"model '{bundle.name}' has no early heads (set model.early_heads)")
    if cfg.source != "trained":
        raise HarnessError(f"unknown early heads source '{cfg.source}' (known: trained)")
    heads = read_trained(bundle, str(cfg.id), f"early heads '{cfg.id}'")
    heads = heads.to(device=bundle.device, dtype=bundle.dtype).eval().requires_grad_(False)
    folder = heads_dir(bundle.model_cache) / str(cfg.id)
    heads.name, heads.name_or_path = str(cfg.id), early_build(cfg, folder)
    heads.layers = json.loads((folder / CONFIG).read_text())["layers"]
    return heads


def early_build(cfg, folder: Path) -> str:
    """The early heads' name as runs record it (`method_settings.early_heads`): the id and its build's digest."""
    return f"trained:{cfg.id}{report_digest(Path(folder) / EARLY_REPORT)}"
