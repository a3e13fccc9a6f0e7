"""What a run needs before anything heavy loads (torch, the model, the data): valid `run.*` values and a results
directory it can write, then settings its method accepts. Called first in `python -m bench.run`'s main(), so a bad
value is one `error:` line in a fraction of a second (a few for a method's, whose module imports torch), never a
traceback minutes into a run.
"""

from __future__ import annotations

import math
import re
import tempfile
from pathlib import Path

from bench.errors import ConfigError
from bench.paths import project_path


def _int(run, key: str, minimum: int, optional: bool = False) -> None:
    value = run.get(key)
    if value is None and optional:
        return
    if not isinstance(value, int) or isinstance(value, bool):
        raise ConfigError(f"run.{key} must be an integer >= {minimum}{' or null' if optional else ''}, got {value!r}")
    if value < minimum:
        raise ConfigError(f"run.{key} must be >= {minimum}, got {value}")


BOOLEANS = ("shuffle", "check_lossless", "sync_phases", "resume", "graphs", "record_steps")


def check_run(cfg) -> None:
    """ConfigError (one line) for a run.* value the runner cannot use, or a results directory it cannot write."""
    run = cfg.run
    _int(run, "max_new_tokens", 1)
    _int(run, "limit", 1, optional=True)
    _int(run, "limit_per_group", 1, optional=True)
    _int(run, "warmup", 0)
    _int(run, "threads", 1, optional=True)
    _int(run, "batch_size", 1)
    _int(run, "seed", 0)
    _int(run, "jobs_beside", 0)
    for key in BOOLEANS:
        if not isinstance(run.get(key), bool):
            raise ConfigError(f"run.{key} must be true or false, got {run.get(key)!r}")
    temperature = run.get("temperature")
    if isinstance(temperature, bool) or not isinstance(temperature, int | float) or not 0 <= temperature < math.inf:
        raise ConfigError(f"run.temperature must be a number >= 0 and finite (0 = greedy), got {temperature!r}")
    check_writable(project_path(cfg.paths.results))
    check_model_keys(cfg.model)
    check_names(cfg)


# What the loader and the runner read from every model config (docs/models.md); the rest have defaults.
MODEL_KEYS = ("name", "target", "dtype", "device", "attn_implementation", "chat_template")


def check_model_keys(model) -> None:
    missing = [k for k in MODEL_KEYS if model.get(k) is None]
    missing += [f"target.{k}" for k in ("source", "id") if model.get("target") and model.target.get(k) is None]
    if missing:
        raise ConfigError(f"model config '{model.get('name')}' lacks {', '.join(missing)} (docs/models.md)")
    if not re.fullmatch(r"(cpu|cuda|mps|xpu)(:\d+)?", str(model.device)):
        raise ConfigError(f"model.device: unknown device '{model.device}' (e.g. cpu, cuda, cuda:1)")


def check_names(cfg) -> None:
    """A config's `name` is its file's stem (runs, references and reports are filed under the name: a copied file
    that kept the old name would pass for the other config)."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return
    choices = HydraConfig.get().runtime.choices
    for group in ("model", "dataset", "method"):
        choice, name = choices.get(group), cfg[group].get("name")
        if choice and name != choice.split("/")[-1]:
            raise ConfigError(f"conf/{group}/{choice}.yaml names itself '{name}': a config's name must be its file's "
                              f"stem ({choice.split('/')[-1]})")


def check_method(cfg) -> None:
    """ConfigError (one line) for a method setting its class refuses (Method.check_settings: type, range, choice,
    unknown key, combination), a greedy-only method at run.temperature > 0, a method that cannot batch at
    run.batch_size > 1, or an attention implementation the engine cannot mask (check_attention); the model is not
    loaded."""
    from methods import method_class  # imports the method's module (torch), not the model

    check_attention(cfg.model)
    cls = method_class(cfg.method.name)
    cls.check_settings(cfg.method)
    batch = cfg.run.get("batch_size", 1)
    if batch > 1 and not cls.batchable:
        raise ConfigError(f"method '{cfg.method.name}' does not decode batches (run.batch_size={batch}); run it at "
                          "run.batch_size=1")
    if getattr(cls, "greedy_only", False) and cfg.run.temperature > 0:
        raise ConfigError(f"method '{cfg.method.name}' decodes greedily only, as its paper; got run.temperature="
                          f"{cfg.run.temperature} (use 0)")
    if cfg.run.get("graphs"):
        check_graphs(cfg, cls)
    elif cfg.run.get("graph_compile"):
        raise ConfigError(f"run.graph_compile={cfg.run.graph_compile} compiles graph mode's forward: it needs "
                          "run.graphs=true")


GRAPH_COMPILE_MODES = ("default", "max-autotune-no-cudagraphs")  # torch.compile's modes that leave capture to us


def check_graphs(cfg, cls) -> None:
    """What graph mode (run.graphs=true, bench.core.graph_engine) cannot run, named in one line."""
    name = cfg.method.name
    why = cls.graphs_refusal(cfg.method)
    if why:
        raise ConfigError(f"run.graphs=true cannot run method '{name}': {why}")
    if cfg.run.temperature > 0:
        raise ConfigError(f"run.graphs=true decodes greedily only (its step captures greedy acceptance; a tree "
                          f"with draft distributions is walked on the host); got run.temperature="
                          f"{cfg.run.temperature}")
    if cfg.run.get("batch_size", 1) > 1:
        raise ConfigError(f"run.graphs=true decodes one sequence at a time; got run.batch_size={cfg.run.batch_size}")
    if cfg.model.get("device_map"):
        raise ConfigError("run.graphs=true needs the target on one device (a graph cannot span a device map); "
                          "set model.device_map=null")
    mode = cfg.run.get("graph_compile")
    if mode is not None and mode not in GRAPH_COMPILE_MODES:
        raise ConfigError(f"run.graph_compile must be null or one of {', '.join(GRAPH_COMPILE_MODES)} (graph mode "
                          f"captures the CUDA graph itself: no torch.compile mode that captures its own), got {mode!r}")
    capacity = cfg.run.get("graph_capacity", "auto")
    if capacity != "auto" and (isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 64):
        raise ConfigError(f"run.graph_capacity must be auto or an integer >= 64 (the static KV cache's positions), "
                          f"got {capacity!r}")


# The engine verifies trees and batches with a 4D additive mask (bench/core/engine.py): eager and sdpa attention
# apply it as given; flash_attention_2/3 read a 4D mask as a 2D padding mask and flex_attention wants a BlockMask,
# so with them a tree step would attend where it must not.
ATTENTION = ("eager", "sdpa")


def check_attention(model) -> None:
    """ConfigError (one line) for an attention implementation the engine's tree and batch masks do not work with."""
    attn = model.get("attn_implementation")
    if attn not in ATTENTION:
        raise ConfigError(f"model.attn_implementation={attn} cannot apply the tree and batch attention masks the "
                          f"engine passes; use {' or '.join(ATTENTION)}")


def check_writable(results: Path) -> None:
    """The results directory exists or can be made, and a file can be created in it (runs as root too, where
    permission bits do not stop a write: so try it)."""
    try:
        results.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=results):
            pass
    except OSError as err:
        raise ConfigError(f"results directory '{results}' (paths.results) is not writable: "
                          f"{err.strerror or type(err).__name__}") from None
