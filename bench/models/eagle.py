"""EAGLE-1 draft head for any decoder-only target (Li et al. 2024): a feature-level draft.

The feature f_i is the target's final hidden state at position i, after the final norm (the lm_head's input). The
head reads pairs (f_i, t_{i+1}) at position i: fc([embed(t_{i+1}); f_i]) (embedding first, no activation), then one
decoder layer of the target's own class and dimensions without its input norm, and no final norm. Its output
f^_{i+1} estimates f_{i+1}; the target's frozen lm_head turns it into the draft distribution of t_{i+2}. Drafting
feeds each output back as the next feature (own-feature autoregression). The embedding and lm_head are the
target's, shared, never copied: the head's own weights are fc and the layer (~4.2M for SmolLM2-135M).

The head's KV cache holds only accepted context; tree nodes are appended for one drafting round and cropped.
"""

from __future__ import annotations

import copy
from pathlib import Path

import torch
from torch import nn

from bench.core.forward import aligned_mask, cache_kw
from bench.errors import HarnessError
from bench.models.identity import hub_revision


class EagleHead(nn.Module):
    def __init__(self, target, bias: bool = True):
        super().__init__()
        config = copy.deepcopy(target.config.get_text_config())
        config.num_hidden_layers = 1
        if getattr(config, "layer_types", None) is not None:
            config.layer_types = config.layer_types[:1]
        self.config = config
        hidden = config.hidden_size
        base = target.get_decoder()
        self.fc = nn.Linear(2 * hidden, hidden, bias=bias)
        self.layer = type(base.layers[0])(config, 0)
        self.layer.input_layernorm = nn.Identity()  # the feature is already normed (it is the lm_head's input)
        self.rotary = type(base.rotary_emb)(config=config)
        # Shared with the target, frozen; kept out of this module's parameters and state dict.
        self.shared = {"embed": target.get_input_embeddings(), "lm_head": target.get_output_embeddings()}

    @property
    def embed(self) -> nn.Module:
        return self.shared["embed"]

    @property
    def lm_head(self) -> nn.Module:
        return self.shared["lm_head"]

    def forward(self, tokens: torch.Tensor, features: torch.Tensor, position_ids: torch.Tensor,
                attention_mask: torch.Tensor | None, cache=None) -> torch.Tensor:
        """tokens [B, T] (t_{i+1}), features [B, T, H] (f_i), position_ids [B, T] (i) -> f^ [B, T, H].
        attention_mask: [B, 1, T, cached + T] additive, or None for a causal chunk."""
        x = self.fc(torch.cat([self.embed(tokens).to(features.dtype), features], dim=-1))
        if attention_mask is None:  # a decoder layer called alone masks nothing by itself
            cached = cache.get_seq_length() if cache is not None else 0
            attention_mask = causal_mask(tokens.shape[1], cached, x.dtype, x.device)
        cos, sin = self.rotary(x, position_ids=position_ids)
        return self.layer(x, attention_mask=attention_mask, position_embeddings=(cos, sin),
                          position_ids=position_ids, **cache_kw(self.layer, cache),
                          use_cache=cache is not None)

    def logits(self, features: torch.Tensor) -> torch.Tensor:
        # The target's lm_head: on a target split over devices it runs on the last one
        return self.lm_head(features).to(features.device)

    def new_cache(self):
        from transformers import DynamicCache

        return DynamicCache(config=self.config)


def causal_mask(n: int, cached: int, dtype, device) -> torch.Tensor:
    """[1, 1, n, cached + n] additive: every new position sees the cache and the new positions up to itself."""
    low = torch.finfo(dtype).min
    mask = aligned_mask((n, cached + n), low, dtype, device)
    mask[:, :cached] = 0.0
    mask[:, cached:] = torch.triu(mask[:, cached:], diagonal=1)
    return mask[None, None]


WEIGHTS = "head.safetensors"  # a trained head's folder: these weights and the training report


def eagle_dir(model_cache: str | Path) -> Path:
    """Trained heads live beside the model cache: data/cache/models -> data/cache/eagle/<id>/."""
    return Path(model_cache).parent / "eagle"


def from_official_keys(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """An official EAGLE-1 checkpoint's keys (fc.*, layers.0.*, embed_tokens.*) as this module's: the embedding is
    the target's own, so it is dropped; a rotary inv_freq buffer is recomputed from the config."""
    out = {}
    for key, value in state.items():
        if key.startswith("embed_tokens.") or key.endswith("rotary_emb.inv_freq"):
            continue
        out["layer." + key[len("layers.0."):] if key.startswith("layers.0.") else key] = value
    return out


def load_eagle(bundle) -> EagleHead:
    """The head a model config's `eagle` block names: `init` (untrained, seeded: lossless, MAT near 1),
    `trained` (data/cache/eagle/<id>/head.safetensors, from `make eagle`), `path` (such a file or an official
    checkpoint folder) or `hub` (an official EAGLE-1 repo, e.g. yuhuili/EAGLE-Vicuna-7B-v1.3)."""
    cfg = bundle.eagle_cfg
    if cfg is None:
        raise HarnessError(f"model '{bundle.name}' has no EAGLE head (set model.eagle)")
    name = cfg.get("name") or cfg.id
    revision = hub_revision(cfg, f"EAGLE head '{name}'").get("revision")  # a pin off the hub: one line, first
    torch.manual_seed(int(cfg.get("seed", 0)))
    head = EagleHead(bundle.model, bias=bool(cfg.get("bias", True)))
    if cfg.source == "trained":
        file = eagle_dir(bundle.model_cache) / str(cfg.id) / WEIGHTS
        if not file.is_file():
            raise HarnessError(f"EAGLE head '{name}' is not built: run `make eagle` (MODEL={bundle.name}; "
                               f"looked in {file.parent})")
        state = read_state(file, f"EAGLE head '{name}'")
    elif cfg.source in ("path", "hub"):
        state = from_official_keys(read_state(official_file(cfg, revision), f"EAGLE head '{name}'"))
    elif cfg.source != "init":
        raise HarnessError(f"unknown EAGLE head source '{cfg.source}' (known: init, trained, path, hub)")
    if cfg.source != "init":
        missing, unexpected = head.load_state_dict(state, strict=False)
        if missing or unexpected:
            raise HarnessError(f"EAGLE head '{name}' does not fit model '{bundle.name}': missing "
                               f"{missing[:3]}, unexpected {unexpected[:3]}")
    return in_dtype(head.to(device=bundle.device), bundle.dtype).eval()


def in_dtype(head: EagleHead, dtype: torch.dtype) -> EagleHead:
    """The head's weights in `dtype`, its rotary frequencies kept in fp32 as transformers keeps the target's: in
    fp16/bf16 the rounded inv_freq shifts the angle of long-distance positions (at position 2000 by up to 2.4 rad
    in bf16 and 0.5 rad in fp16 for Llama-2's theta 10000, head dim 128) and lowers acceptance."""
    head.fc.to(dtype)
    head.layer.to(dtype)
    return head


def official_file(cfg, revision: str | None = None) -> Path:
    """The weights file of an official checkpoint (a folder or a file; a hub repo downloaded once, at `revision`)."""
    if cfg.source == "path":
        path = Path(str(cfg.id))
        if not path.exists():
            raise HarnessError(f"EAGLE head path '{path}' does not exist")
        if path.is_file():
            return path
        found = [path / f for f in ("pytorch_model.bin", "model.safetensors") if (path / f).is_file()]
        if not found:
            raise HarnessError(f"no pytorch_model.bin or model.safetensors in {path}")
        return found[0]
    from huggingface_hub import hf_hub_download

    try:
        return Path(hf_hub_download(repo_id=str(cfg.id), filename="pytorch_model.bin", revision=revision))
    except Exception as err:  # noqa: BLE001 - offline, no such repo or file, network: all one line
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise HarnessError(f"cannot get EAGLE head '{cfg.id}' from the hub: {first[:200]}") from None


def read_state(file: Path, what: str) -> dict[str, torch.Tensor]:
    try:
        if file.suffix == ".safetensors":
            from safetensors.torch import load_file

            return load_file(str(file))
        return torch.load(file, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 - a truncated or foreign file: one line
        raise HarnessError(f"{what}: cannot read {file}: {str(err).splitlines()[0][:200]}") from None
