"""EAGLE-3 draft head (Li et al. 2025) for a Llama-like target, in the official checkpoints' layout.

Fused features: the target's residual-stream states entering three decoder layers (low, mid, high: 2, L/2 and L-3
by default, pre-norm, HF's hidden_states[i]) are concatenated [3H] and `fc` (3H -> H, no bias) fuses them. The
head reads pairs (g_i, t_{i+1}) at position i, as EAGLE-1's does: its decoder layer (`midlayer`) normalises the
token's embedding (`input_layernorm`) and the state (`hidden_norm`) apart, attends over both (q/k/v take their
concatenation [emb; state], 2H), keeps the un-normed state as the residual, then a Llama MLP. Its output is fed
back un-normed as the next step's state (`fc` is skipped for a state already of width H); its own final `norm`
and `lm_head` score a reduced draft vocabulary of N tokens, and draft index i is target token i + d2t[i] (`t2d`
marks the kept target ids). Official code: EAGLE's `eagle/model/cnets.py`; facts in docs/methods.md.

The layer is built from transformers' public Llama modules (attention, MLP, RMSNorm, rotary embedding) at the
target's dimensions, the q/k/v projections widened to 2H. The embedding is the target's own, shared and frozen
(the checkpoints ship none). Keys and config are the official ones (`fc.weight`, `midlayer.*`, `norm.weight`,
`lm_head.weight`, `d2t`, `t2d`; config.json with `draft_vocab_size`), so `yuhuili/EAGLE3-*` heads load; the fused
layers are the config's `eagle_config.eagle_aux_hidden_state_layer_ids` (vLLM's name, ids of decoder-layer
inputs) when given, else the default above.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import nn
from transformers import DynamicCache, LlamaConfig
from transformers.models.llama.modeling_llama import (
    LlamaAttention,
    LlamaMLP,
    LlamaRMSNorm,
    LlamaRotaryEmbedding,
)

from bench.cachefile import atomic_dir
from bench.core.forward import cache_kw
from bench.errors import HarnessError
from bench.models.eagle import causal_mask, read_state
from bench.models.identity import hub_revision

ARCHITECTURE = "LlamaForCausalLMEagle3"  # the official heads' (SGLang's and SpecForge's) architecture name
WEIGHT_FILES = ("pytorch_model.bin", "model.safetensors")  # what the official loader tries, in that order
LAYERS_KEY = "eagle_aux_hidden_state_layer_ids"


def default_layers(n_layers: int) -> tuple[int, int, int]:
    """EAGLE-3's low, mid and high layers (2, L // 2, L - 3: EAGLE's code, vLLM and SGLang); a target of fewer than
    6 layers (test models) takes its first, middle and last layer's inputs instead."""
    if n_layers >= 6:
        return (2, n_layers // 2, n_layers - 3)
    return (0, n_layers // 2, n_layers - 1)


def head_config(target_config, draft_vocab: int | None = None, layers=None) -> LlamaConfig:
    """A head config at the target's dimensions (a Llama layer whatever the target's class, as the official heads)."""
    text = target_config.get_text_config()
    heads = text.num_attention_heads
    config = LlamaConfig(
        architectures=[ARCHITECTURE], hidden_size=text.hidden_size, intermediate_size=text.intermediate_size,
        num_attention_heads=heads, num_key_value_heads=getattr(text, "num_key_value_heads", None) or heads,
        head_dim=getattr(text, "head_dim", None) or text.hidden_size // heads, hidden_act=text.hidden_act,
        rms_norm_eps=getattr(text, "rms_norm_eps", 1e-6), max_position_embeddings=text.max_position_embeddings,
        rope_parameters=dict(text.rope_parameters), vocab_size=text.vocab_size, num_hidden_layers=1,
        tie_word_embeddings=False)
    config.draft_vocab_size = draft_vocab or text.vocab_size
    config.eagle_config = {LAYERS_KEY: list(layers or default_layers(text.num_hidden_layers))}
    config._attn_implementation = text._attn_implementation
    return config


class Eagle3Layer(nn.Module):
    """The official `LlamaDecoderLayeremb`: attention over [input_layernorm(emb); hidden_norm(state)], residual the
    un-normed state, then post_attention_layernorm and the MLP."""

    def __init__(self, config: LlamaConfig):
        super().__init__()
        hidden = config.hidden_size
        self.self_attn = LlamaAttention(config, layer_idx=0)
        for name in ("q_proj", "k_proj", "v_proj"):  # they read the concatenation: 2H inputs
            proj = getattr(self.self_attn, name)
            setattr(self.self_attn, name, nn.Linear(2 * hidden, proj.out_features, bias=proj.bias is not None))
        self.mlp = LlamaMLP(config)
        self.input_layernorm = LlamaRMSNorm(hidden, eps=config.rms_norm_eps)
        self.hidden_norm = LlamaRMSNorm(hidden, eps=config.rms_norm_eps)
        self.post_attention_layernorm = LlamaRMSNorm(hidden, eps=config.rms_norm_eps)

    def forward(self, emb, state, attention_mask, position_embeddings, cache) -> torch.Tensor:
        x = torch.cat([self.input_layernorm(emb), self.hidden_norm(state)], dim=-1)
        x, _ = self.self_attn(hidden_states=x, position_embeddings=position_embeddings, attention_mask=attention_mask,
                              **cache_kw(self.self_attn, cache))
        h = state + x
        return h + self.mlp(self.post_attention_layernorm(h))


class Eagle3Head(nn.Module):
    """config: the head's (head_config or an official config.json); embed: the target's input embedding (shared,
    kept out of this module's parameters and state dict)."""

    def __init__(self, config: LlamaConfig, embed: nn.Module):
        super().__init__()
        self.config = config
        hidden, vocab, draft = config.hidden_size, config.vocab_size, config.draft_vocab_size
        if getattr(config, "target_hidden_size", hidden) != hidden:
            raise HarnessError(f"EAGLE-3 head of width {hidden} for a target of width {config.target_hidden_size}: "
                               "such heads carry their own embedding, which is not supported")
        self.fc = nn.Linear(3 * hidden, hidden, bias=False)
        self.midlayer = Eagle3Layer(config)
        self.norm = LlamaRMSNorm(hidden, eps=config.rms_norm_eps)
        self.lm_head = nn.Linear(hidden, draft, bias=False)
        self.rotary = LlamaRotaryEmbedding(config=config)  # inv_freq: not in the state dict, kept in fp32
        # Draft index i is target id i + d2t[i]; t2d marks the kept target ids. A full vocabulary maps to itself.
        self.register_buffer("d2t", torch.zeros(draft, dtype=torch.long))
        self.register_buffer("t2d", torch.arange(vocab) < draft)
        self.shared = {"embed": embed}

    @classmethod
    def from_target(cls, target, tokens=None, layers=None, seed: int | None = None) -> Eagle3Head:
        """An untrained head for `target` (random weights; seeded without touching the global generator), over
        the target ids `tokens` (None: the whole vocabulary) and fusing `layers` (None: the default)."""
        config = head_config(target.config, len(tokens) if tokens is not None else None, layers)
        check_layers(config, target)
        with torch.random.fork_rng(devices=[]):
            if seed is not None:
                torch.manual_seed(seed)
            head = cls(config, target.get_input_embeddings())
        if tokens is not None:
            head.set_vocabulary(torch.as_tensor(tokens))
        return head

    @property
    def embed(self) -> nn.Module:
        return self.shared["embed"]

    @property
    def layers(self) -> tuple[int, ...]:
        """The target decoder layers whose input states the head fuses, low to high."""
        return tuple(int(i) for i in self.config.eagle_config[LAYERS_KEY])

    def set_vocabulary(self, tokens: torch.Tensor) -> None:
        """Score the target ids `tokens` (ascending, as the official vocabulary scan stores them)."""
        tokens = tokens.to(self.d2t.device).unique()  # sorted
        if tokens.numel() != self.d2t.numel():
            raise ValueError(f"{tokens.numel()} distinct tokens for a draft vocabulary of {self.d2t.numel()}")
        self.d2t.copy_(tokens - torch.arange(len(tokens), device=tokens.device))
        self.t2d.zero_()
        self.t2d[tokens] = True

    def forward(self, tokens: torch.Tensor, states: torch.Tensor, position_ids: torch.Tensor,
                attention_mask: torch.Tensor | None, cache=None) -> torch.Tensor:
        """tokens [B, T] (t_{i+1}), states [B, T, 3H] (the target's fused layers at i) or [B, T, H] (the head's
        own output at i), position_ids [B, T] (i) -> the un-normed output [B, T, H]. attention_mask: [B, 1, T,
        cached + T] additive, or None for a causal chunk."""
        if states.shape[-1] != self.config.hidden_size:
            states = self.fc(states)
        emb = self.embed(tokens).to(states)  # the target's embedding: on its own device when it is split
        if attention_mask is None:
            cached = cache.get_seq_length() if cache is not None else 0
            attention_mask = causal_mask(tokens.shape[1], cached, states.dtype, states.device)
        cos, sin = self.rotary(states, position_ids=position_ids)
        return self.midlayer(emb, states, attention_mask, (cos, sin), cache)

    def logits(self, outputs: torch.Tensor) -> torch.Tensor:
        """Draft-vocabulary logits [..., N] of the head's outputs."""
        return self.lm_head(self.norm(outputs))

    def to_target(self, indices: torch.Tensor) -> torch.Tensor:
        """Target token ids of draft-vocabulary indices."""
        return indices + self.d2t[indices]

    def to_draft(self, tokens: torch.Tensor) -> torch.Tensor:
        """Draft-vocabulary indices of target ids; -1 for a token outside the draft vocabulary."""
        index = torch.full_like(self.t2d, -1, dtype=torch.long)
        every = torch.arange(len(self.d2t), device=self.d2t.device)
        index[self.to_target(every)] = every
        return index[tokens]

    def new_cache(self):
        return DynamicCache(config=self.config)


def fused_layers(target, layers=None) -> tuple[int, ...]:
    """The target layers an EAGLE-3 head of `target` fuses: `layers` when given, else the default."""
    return tuple(int(i) for i in (layers or default_layers(target.config.get_text_config().num_hidden_layers)))


def check_layers(config: LlamaConfig, target) -> None:
    n = target.config.get_text_config().num_hidden_layers
    layers = config.eagle_config[LAYERS_KEY]
    if len(layers) != 3 or not all(0 <= int(i) < n for i in layers):
        raise HarnessError(f"EAGLE-3 fuses three decoder layers' inputs; layers {list(layers)} for a target of "
                           f"{n} layers")


def in_dtype(head: Eagle3Head, dtype: torch.dtype) -> Eagle3Head:
    """The weights in `dtype`; the rotary frequencies stay fp32 (bench.models.eagle.in_dtype says why) and the
    vocabulary maps integer."""
    for module in (head.fc, head.midlayer, head.norm, head.lm_head):
        module.to(dtype)
    return head


def save_head(head: Eagle3Head, folder: str | Path, extra: dict[str, str] | None = None) -> Path:
    """The official layout: config.json and the weights (model.safetensors) under the official key names, with
    `extra` text files (name -> text, e.g. a training report) written in the same atomic step."""
    from safetensors.torch import save_file

    folder = Path(folder)
    with atomic_dir(folder) as tmp:
        config = head.config.to_dict()
        config["architectures"] = [ARCHITECTURE]
        (tmp / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
        save_file({k: v.detach().cpu().contiguous() for k, v in head.state_dict().items()},
                  str(tmp / "model.safetensors"))
        for name, text in (extra or {}).items():
            (tmp / name).write_text(text)
    return folder


def read_head(config_file: Path, weights: Path, target, name: str, layers=None) -> Eagle3Head:
    """A head from an official-layout config and weights, for `target`; `layers` overrides the fused layers."""
    try:
        raw = json.loads(Path(config_file).read_text())
    except (OSError, ValueError) as err:
        raise HarnessError(f"EAGLE-3 head '{name}': cannot read {config_file}: {str(err).splitlines()[0]}") from None
    config = LlamaConfig(**{k: v for k, v in raw.items() if k != "transformers_version"})
    n_layers = target.config.get_text_config().num_hidden_layers
    given = (getattr(config, "eagle_config", None) or {}).get(LAYERS_KEY)
    config.eagle_config = {LAYERS_KEY: list(layers or given or default_layers(n_layers))}
    config._attn_implementation = target.config.get_text_config()._attn_implementation
    if not hasattr(config, "draft_vocab_size"):
        config.draft_vocab_size = config.vocab_size
    check_layers(config, target)
    head = Eagle3Head(config, target.get_input_embeddings())
    state = {k: v for k, v in read_state(Path(weights), f"EAGLE-3 head '{name}'").items()
             if not k.startswith("embed_tokens.")}  # a frozen copy of the target's: the target's own is used
    try:
        missing, unexpected = head.load_state_dict(state, strict=False)
    except RuntimeError as err:  # a shape that differs: another target's head
        raise HarnessError(f"EAGLE-3 head '{name}' does not fit the target: {str(err).splitlines()[-1][:200]}") from None
    # Official heads over the whole vocabulary drop their maps (ea_model.py): the identity ones stay.
    full = config.draft_vocab_size == config.vocab_size
    missing = [k for k in missing if not (full and k in ("d2t", "t2d"))]
    fits = head.fc.in_features == 3 * target.config.get_text_config().hidden_size
    if missing or unexpected or config.vocab_size != head.embed.weight.shape[0] or not fits:
        raise HarnessError(f"EAGLE-3 head '{name}' does not fit the target: missing {missing[:3]}, unexpected "
                           f"{unexpected[:3]}, vocabulary {config.vocab_size}, fc input {head.fc.in_features}")
    return head


def head_files(folder: Path, name: str) -> tuple[Path, Path]:
    """config.json and the weights of a head folder (pytorch_model.bin first, as the official loader)."""
    found = [folder / f for f in WEIGHT_FILES if (folder / f).is_file()]
    if not (folder / "config.json").is_file() or not found:
        raise HarnessError(f"EAGLE-3 head '{name}': no config.json and {' or '.join(WEIGHT_FILES)} in {folder}")
    return folder / "config.json", found[0]


def hub_files(repo: str, revision: str | None = None) -> tuple[Path, Path]:
    """config.json and the weights of an official head on the hub (downloaded once, at `revision` if pinned); one
    line when unreachable."""
    from huggingface_hub import hf_hub_download

    def one_line(err: Exception) -> HarnessError:
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        return HarnessError(f"cannot get EAGLE-3 head '{repo}' from the hub: {first[:200]}")

    try:
        config = Path(hf_hub_download(repo_id=repo, filename="config.json", revision=revision))
    except Exception as err:  # noqa: BLE001 - offline, no such repo, network: all one line
        raise one_line(err) from None
    for filename in WEIGHT_FILES:
        try:
            return config, Path(hf_hub_download(repo_id=repo, filename=filename, revision=revision))
        except Exception as err:  # noqa: BLE001 - the next file name, or one line after the last
            last = err
    raise one_line(last) from None


def eagle3_dir(model_cache: str | Path) -> Path:
    """Trained heads live beside the model cache: data/cache/models -> data/cache/eagle3/<id>/."""
    return Path(model_cache).parent / "eagle3"


def init_eagle3(target, device, dtype, seed: int = 0, layers=None) -> Eagle3Head:
    """An untrained head over the whole vocabulary, on the target's device and dtype: lossless, MAT near 1."""
    return in_dtype(Eagle3Head.from_target(target, layers=layers, seed=seed).to(device), dtype).eval()


def load_eagle3(bundle) -> Eagle3Head:
    """The head a model config's `eagle3` block names: `init` (untrained, seeded), `trained`
    (data/cache/eagle3/<id>/, written by training), `path` (a folder in the official layout) or `hub` (an official
    repo, e.g. yuhuili/EAGLE3-LLaMA3.1-Instruct-8B); `layers` overrides the fused layers."""
    cfg = bundle.eagle3_cfg
    if cfg is None:
        raise HarnessError(f"model '{bundle.name}' has no EAGLE-3 head: give its model config an `eagle3` block "
                           "(conf/model/smollm2-135m.yaml has one; `source: init` is an untrained head)")
    name, layers = str(cfg.get("name") or cfg.id), cfg.get("layers")
    revision = hub_revision(cfg, f"EAGLE-3 head '{name}'").get("revision")
    layers = list(layers) if layers is not None else None
    if cfg.source == "init":
        return init_eagle3(bundle.model, bundle.device, bundle.dtype, int(cfg.get("seed", 0)), layers)
    if cfg.source == "trained":
        folder = eagle3_dir(bundle.model_cache) / str(cfg.id)
        if not (folder / "config.json").is_file():
            raise HarnessError(f"EAGLE-3 head '{name}' is not built: train it with `make eagle3` (MODEL={bundle.name};"
                               f" looked in {folder})")
        files = head_files(folder, name)
    elif cfg.source == "path":
        if not Path(str(cfg.id)).is_dir():
            raise HarnessError(f"EAGLE-3 head path '{cfg.id}' is not a folder")
        files = head_files(Path(str(cfg.id)), name)
    elif cfg.source == "hub":
        files = hub_files(str(cfg.id), revision)
    else:
        raise HarnessError(f"unknown EAGLE-3 head source '{cfg.source}' (known: init, trained, path, hub)")
    head = read_head(*files, bundle.model, name, layers)
    return in_dtype(head.to(device=bundle.device), bundle.dtype).eval()
