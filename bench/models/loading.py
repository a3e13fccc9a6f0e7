"""Load a target model from a model config (HF hub id, local path or packaged GGUF), and its draft on demand.

A model config's `draft` block names the draft model of draft-model methods (sd, specinfer, sequoia, dyspec,
hf_assisted): `source: hub | path | trained | eagle`, where `trained` is a draft distilled from the target by
`make draft` (scripts/train_draft.py) into data/cache/drafts/<id>/ (beside the model cache, git-ignored) and
`eagle` the model's EAGLE head (its `eagle` block) driven as a draft model (bench/models/eagle_draft.py).
The draft is loaded by `ModelBundle.load_draft()` the first time a method asks for it, never with the target.
Likewise the `heads` block names Medusa heads (medusa, bpd; bench/models/heads.py), loaded by
`ModelBundle.load_heads()`; `trained` heads are written by `make heads` into data/cache/heads/<id>/.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import torch

from bench.cachefile import CorruptCache, atomic_dir, load_or_build, load_or_fail
from bench.errors import HarnessError
from bench.models import backend_choice, linear_backend, placement, random_init
from bench.models.built import recipe_differs, report_digest
from bench.models.eagle import eagle_dir, load_eagle
from bench.models.eagle3 import eagle3_dir, load_eagle3
from bench.models.eagle_draft import EagleDraft
from bench.models.heads import load_early_heads, load_heads
from bench.models.identity import hub_revision, packaged_gguf, weights_id
from bench.models.vocab import TrimmedDraft, fit_vocabulary, read_ranking, trim
from bench.paths import project_path
from data.loaders import quiet_hub_logs

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


@dataclass
class ModelBundle:
    name: str
    model: object
    tokenizer: object
    device: torch.device
    dtype: torch.dtype
    vocab_size: int
    eos_token_ids: list[int]
    pad_token_id: int
    max_context: int
    source: str
    draft_cfg: object = None  # the model config's `draft` block (None: the model has no draft)
    model_cache: str | None = None  # where converted models live; trained drafts are in its sibling drafts/
    # The draft once loaded (or set directly, e.g. tests put an untrained draft from init_draft_from_target).
    draft: object = field(default=None, repr=False)
    heads_cfg: object = None  # the model config's `heads` block (None: the model has no Medusa heads)
    # The Medusa heads once loaded (or set directly, e.g. tests put untrained heads from heads.init_heads).
    heads: object = field(default=None, repr=False)
    early_heads_cfg: object = None  # the model config's `early_heads` block (ProPD's pruning heads)
    early_heads: object = field(default=None, repr=False)
    eagle_cfg: object = None  # the model config's `eagle` block (EAGLE's feature-level draft head)
    eagle: object = field(default=None, repr=False)
    eagle3_cfg: object = None  # the model config's `eagle3` block (EAGLE-3's head: bench/models/eagle3.py)
    eagle3: object = field(default=None, repr=False)
    # The CPU linear backend the target runs on (bench.models.linear_backend); drafts and heads get the same one.
    linear_backend: str = "plain"
    # What identifies the target's weights beyond its config's name (weights_id): the greedy reference and the
    # runner's baselines are keyed on it, so a run with other weights under the same name never passes for it.
    weights: str = ""

    def load_draft(self):
        """The draft model: loaded once and kept on the bundle; same device and dtype as the target, eval mode.
        With `draft.vocab` set, a bench.models.vocab.TrimmedDraft scoring only that many tokens."""
        if self.draft is None:
            self.draft = load_draft_model(self)
            linear_backend.follow(self.draft, self.model)
        return self.draft

    def draft_label(self) -> str:
        """A name for the draft as loaded, for caches that depend on it (Sequoia's acceptance vector and cost):
        its id, depth and vocabulary, and for a trained draft a digest of its report (a retrained draft is new)."""
        draft = self.load_draft()
        cfg = self.draft_cfg
        if isinstance(draft, EagleDraft):  # the head's source and, once trained, its report's digest
            three = draft.feature_layers is not None
            eagle = self.eagle3_cfg if three else self.eagle_cfg
            label = f"eagle{'3' if three else ''}-{eagle.id}-{eagle.source}"
            folder = (eagle3_dir if three else eagle_dir)(self.model_cache or ".") / str(eagle.id)
            report = folder / ("eagle3_report.json" if three else "eagle_report.json")
            label += report_digest(report) if eagle.source == "trained" else ""
            return label.replace("/", "_")
        label = f"{cfg.id if cfg is not None else 'draft'}-{draft.config.num_hidden_layers}l"
        label += f"-v{draft.vocab_ids.numel()}" if isinstance(draft, TrimmedDraft) else ""
        if cfg is not None and cfg.source == "trained" and self.model_cache is not None:
            label += report_digest(drafts_dir(self.model_cache) / str(cfg.id) / "draft_report.json")
        return label.replace("/", "_")

    def load_heads(self):
        """The Medusa heads: loaded once and kept on the bundle; same device and dtype as the target, eval mode."""
        if self.heads is None:
            self.heads = load_heads(self)
            linear_backend.follow(self.heads, self.model)
        return self.heads

    def load_eagle(self):
        """The EAGLE head (bench.models.eagle): loaded once and kept on the bundle."""
        if self.eagle is None:
            self.eagle = load_eagle(self)
            linear_backend.follow(self.eagle, self.model)
        return self.eagle

    def load_eagle3(self):
        """The EAGLE-3 head (bench.models.eagle3): loaded once and kept on the bundle."""
        if self.eagle3 is None:
            self.eagle3 = load_eagle3(self)
            linear_backend.follow(self.eagle3, self.model)
        return self.eagle3

    def load_early_heads(self):
        """ProPD's early prediction heads (bench.models.heads.load_early_heads): loaded once and kept on the bundle."""
        if self.early_heads is None:
            self.early_heads = load_early_heads(self)
            linear_backend.follow(self.early_heads, self.model)
        return self.early_heads


def convert_gguf(gguf: Path, dtype, cache_dir: Path):
    """Dequantize once, then keep a safetensors copy keyed by the GGUF's size and mtime. Several processes
    (pytest workers, a sweep's jobs) may start at once: one converts, the others wait for it and reuse its folder;
    an incomplete or damaged folder is reported, removed and converted again (bench.cachefile)."""
    stat = gguf.stat()
    key = hashlib.sha1(f"{gguf.name}:{stat.st_size}:{int(stat.st_mtime)}".encode()).hexdigest()[:10]
    converted = cache_dir / f"{gguf.stem}-{key}"

    def build(path: Path) -> Path:
        write_converted(gguf, path)
        return path

    return str(load_or_build(converted, check_model_dir, build, "converted model"))


def write_converted(gguf: Path, converted: Path) -> None:
    """The GGUF's weights as a plain fp32 model folder, written beside and renamed into place."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    # A GGUF-loaded model refuses save_pretrained (it counts as quantized), but its weights are already
    # dequantized: copy them into a plain model of the same config and save that.
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(loaded.state_dict())
    plain.generation_config = loaded.generation_config
    with atomic_dir(converted) as tmp:
        plain.save_pretrained(tmp)
        tok.save_pretrained(tmp)


def check_model_dir(path: Path) -> Path:
    """`path` if it holds a whole model folder: config.json, every JSON file parses, every safetensors file is as
    long as its header says (a cut-off copy is shorter) and an index's shards exist; else CorruptCache (or the
    JSON/OS error). Reads headers only, so it costs milliseconds."""
    path = Path(path)
    if not (path / "config.json").is_file():
        raise CorruptCache("no config.json")
    parsed = {f.name: json.loads(f.read_text()) for f in path.glob("*.json")}
    shards = set(parsed.get("model.safetensors.index.json", {}).get("weight_map", {}).values())
    weights = sorted(path.glob("*.safetensors"))
    if not weights or not shards <= {f.name for f in weights}:
        raise CorruptCache("safetensors weights missing")
    for f in weights:
        size = f.stat().st_size
        with f.open("rb") as fh:
            n = int.from_bytes(fh.read(8), "little")
            if not 0 < n <= size - 8:
                raise CorruptCache(f"{f.name}: no safetensors header")
            header = json.loads(fh.read(n))
        end = max((t["data_offsets"][1] for k, t in header.items() if k != "__metadata__"), default=0)
        if size != 8 + n + end:
            raise CorruptCache(f"{f.name} has {size} bytes, its header says {8 + n + end}")
    return path


def drafts_dir(model_cache: str | Path) -> Path:
    """Trained drafts live beside the model cache: data/cache/models -> data/cache/drafts/<id>/."""
    return Path(model_cache).parent / "drafts"


def load_draft_model(bundle: ModelBundle):
    from transformers import AutoModelForCausalLM

    cfg = bundle.draft_cfg
    if cfg is None:
        raise HarnessError(f"model '{bundle.name}' has no draft model (set model.draft)")
    name = cfg.get("name") or cfg.id
    pinned = hub_revision(cfg, f"draft '{name}'")  # a pin off the hub: one line, first
    if cfg.source in ("eagle", "eagle3"):  # the model's EAGLE-1 or EAGLE-3 head as the draft (eagle_draft.py)
        if cfg.get("vocab") is not None:
            raise HarnessError(f"draft '{name}': `vocab` needs a trained draft (its token ranking); set it to null "
                               "(an EAGLE head scores with its own or the target's lm_head)")
        head = bundle.load_eagle() if cfg.source == "eagle" else bundle.load_eagle3()
        block = bundle.eagle_cfg if cfg.source == "eagle" else bundle.eagle3_cfg
        return EagleDraft(head, bundle.model, f"{cfg.source}:{block.get('name') or block.id}", bundle.device,
                          bundle.dtype)
    if cfg.source == "trained":
        if bundle.model_cache is None:
            raise HarnessError(f"draft '{name}': no model cache to find trained drafts in")
        path = drafts_dir(bundle.model_cache) / str(cfg.id)
        if not (path / "config.json").is_file():
            raise HarnessError(f"draft '{name}' is not built: run `make draft` (MODEL={bundle.name}; looked in {path})")
        load_or_fail(path, check_model_dir, f"trained draft '{name}' ({path})", f"`make draft MODEL={bundle.name}`")
        recipe_differs(path / "draft_report.json", cfg.get("train"), f"trained draft '{name}'",
                       f"`make draft MODEL={bundle.name}`")
    else:
        path = path_or_hub(cfg.source, cfg.id, "draft", "trained, eagle, eagle3")
    try:
        with quiet_hub_logs():
            draft = AutoModelForCausalLM.from_pretrained(
                str(path), dtype=bundle.dtype, attn_implementation=bundle.model.config._attn_implementation,
                **placement.straight_to(bundle.device), **pinned,
            ).to(bundle.device)
            vocab = draft.get_output_embeddings().weight.shape[0]
            # Its own tokenizer only where the sizes differ: to check the draft's vocabulary contains the target's.
            draft_tokenizer = own_tokenizer(path, **pinned) if vocab > bundle.vocab_size else None
    except (OSError, ValueError) as err:
        raise HarnessError(f"cannot load draft '{name}' from {cfg.source} '{path}': "
                           f"{str(err).splitlines()[0]}") from None
    draft = fit_vocabulary(draft, bundle.vocab_size, bundle.tokenizer, draft_tokenizer,
                           f"draft '{name}' has vocabulary size {vocab}, target '{bundle.name}' has {bundle.vocab_size}")
    size = cfg.get("vocab")
    if size is not None and cfg.source != "trained":
        raise HarnessError(f"draft '{name}': `vocab` needs a trained draft (its token ranking); set it to null")
    return trim(draft.eval(), read_ranking(path) if size is not None else None, size)


def path_or_hub(source: str, ident, what: str, other: str) -> str:
    """A local path (must exist) or a hub id, for targets and drafts alike; `other` names the sources the caller
    handles itself (package for targets; trained, eagle and eagle3 for drafts)."""
    if source == "path":
        if not Path(str(ident)).exists():
            raise HarnessError(f"{what} path '{ident}' does not exist")
        return str(ident)
    if source == "hub":
        return str(ident)
    raise HarnessError(f"unknown {what} source '{source}' (known: hub, path, {other})")


def load_model(cfg, model_cache: str) -> ModelBundle:
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # per-tensor bars would bury the run's own progress and errors

    target = cfg.target
    if cfg.dtype not in DTYPES:
        raise HarnessError(f"unknown dtype '{cfg.dtype}' (known: {', '.join(DTYPES)})")
    dtype = DTYPES[cfg.dtype]
    try:
        device = torch.device(cfg.device)
    except RuntimeError:
        raise HarnessError(f"model '{cfg.name}': unknown device '{cfg.device}' (e.g. cpu, cuda, cuda:1)") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise HarnessError(f"model '{cfg.name}' wants device cuda, but no CUDA device is available")
    pinned = hub_revision(target, f"model '{cfg.name}'")  # a pin on a package or folder: one line, first
    if target.source == "package":
        path = convert_gguf(packaged_gguf(target.id, target.get("gguf_file")), dtype, Path(model_cache))
    else:
        path = path_or_hub(target.source, target.id, "model", "package")
    mapped = cfg.get("device_map") is not None
    reserve = companion_bytes(cfg, dtype, model_cache) if mapped and not cfg.get("random_init") else 0
    try:
        with quiet_hub_logs():  # offline, the hub client logs a retry warning per attempt: the line below says why
            placement.check_fits(cfg, path, dtype, device, pinned.get("revision"))  # before any weight is read
            tokenizer = AutoTokenizer.from_pretrained(path, **pinned)
            placed = placement.load_kwargs(cfg, device, reserve)
            if cfg.get("random_init"):  # random weights of a named shape, for timing (bench/models/random_init.py)
                model = random_init.build(cfg.random_init, dtype, device, cfg.attn_implementation,
                                          cfg.get("device_map"))
            else:
                model = AutoModelForCausalLM.from_pretrained(
                    path, dtype=dtype, attn_implementation=cfg.attn_implementation, **placed, **pinned
                )
    except (OSError, ValueError) as err:
        # No hub (offline machine), a wrong id, a folder that is no model (transformers' ValueError): one line.
        raise HarnessError(f"cannot load model '{cfg.name}' from {target.source} '{path}': "
                           f"{str(err).splitlines()[0]}") from None
    if mapped:  # a device map: accelerate's hooks place (and fetch offloaded) weights; inputs go to its first device
        device = placement.input_device(model, device)
    else:
        model = model.to(device)  # already there, except on the CPU, where from_pretrained builds it
    model.eval()
    # Offloaded weights are fetched by hooks at each forward: a prepacked copy would go stale, so maps run plain.
    option = "plain" if mapped else cfg.get("cpu_linear", "auto")
    backend = backend_choice.apply(model, option, cfg.name, backend_choice.choice_dir(model_cache))
    gen = model.generation_config
    eos = gen.eos_token_id if gen.eos_token_id is not None else tokenizer.eos_token_id
    eos_ids = [eos] if isinstance(eos, int) else list(eos)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos_ids[0]
    return ModelBundle(
        name=random_init.label(cfg),
        model=model,
        tokenizer=tokenizer,
        device=device,
        dtype=dtype,
        vocab_size=model.get_output_embeddings().weight.shape[0],
        eos_token_ids=eos_ids,
        pad_token_id=pad,
        max_context=int(getattr(model.config, "max_position_embeddings", 2048)),
        source=f"{target.source}:{target.id}",
        draft_cfg=cfg.get("draft"),
        heads_cfg=cfg.get("heads"),
        early_heads_cfg=cfg.get("early_heads"),
        eagle_cfg=cfg.get("eagle"),
        eagle3_cfg=cfg.get("eagle3"),
        model_cache=str(model_cache),
        linear_backend=backend,
        weights=weights_id(cfg),
    )


def own_tokenizer(path, revision: str | None = None):
    """A draft's own tokenizer, or None where its folder has none that loads (the vocabularies cannot be compared
    then, and a wider draft is refused)."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(path), revision=revision)
    except (OSError, ValueError):
        return None


def companion_bytes(cfg, dtype: torch.dtype, model_cache: str) -> int:
    """Bytes of the draft model a config names (a hub or local folder, or a trained draft once built), estimated
    from its config.json: the room a device map keeps free on the first GPU, where the draft goes. EAGLE and Medusa
    heads are not counted (no config with a device map has them; ~2-3 GB at a 70B target's width): a config that adds
    them sets model.max_memory."""
    draft = cfg.get("draft")
    if draft is None or draft.source in ("eagle", "eagle3"):
        return 0
    if draft.source == "trained":
        path = drafts_dir(model_cache) / str(draft.id)
        return placement.weight_bytes(str(path), dtype) if (path / "config.json").is_file() else 0
    path = path_or_hub(draft.source, draft.id, "draft", "trained, eagle, eagle3")
    try:
        return placement.weight_bytes(path, dtype, hub_revision(draft, "draft").get("revision"))
    except OSError as err:
        raise HarnessError(f"cannot read the config of draft '{draft.get('name') or draft.id}' ({path}), whose size a "
                           f"device map keeps free: {str(err).splitlines()[0]}") from None


def load_tokenizer(model_cfg, model_cache: str = "data/cache/models"):
    """Only the model's tokenizer (a packaged GGUF is converted once, as for the model)."""
    from transformers import AutoTokenizer

    target = model_cfg.target
    if target.source == "package":
        path = convert_gguf(packaged_gguf(target.id, target.get("gguf_file")), None, project_path(model_cache))
    else:
        path = str(target.id)
    pinned = hub_revision(target, f"model '{model_cfg.name}'")
    try:
        with quiet_hub_logs():
            return AutoTokenizer.from_pretrained(path, **pinned)
    except (OSError, ValueError) as err:
        raise HarnessError(
            f"cannot load the tokenizer of model '{model_cfg.name}' from '{path}': {str(err).splitlines()[0]}"
        ) from None
