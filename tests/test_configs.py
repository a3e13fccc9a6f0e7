"""Every config composes: each experiment, and every model x dataset x method combination."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.paths import PROJECT
from methods import REGISTRY


@pytest.fixture(scope="module")
def compose_cfg():
    """bench.run.compose.compose_config's composition, with Hydra initialized once for the module's ~400
    compositions (initializing per call is a third of each one's time)."""
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(PROJECT / "conf"), version_base="1.3"):
        yield lambda *overrides: compose("config", overrides=list(overrides))


def names(group: str) -> list[str]:
    """Options of a config group; nested folders (conf/experiment/<paper>/) give `<paper>/<name>`."""
    root = Path(PROJECT, "conf", group)
    return sorted(str(p.relative_to(root).with_suffix("")) for p in root.rglob("*.yaml"))


@pytest.mark.parametrize("experiment", names("experiment"))
def test_experiment_composes(compose_cfg, experiment):
    cfg = compose_cfg(f"experiment={experiment}")
    assert cfg.method.name in REGISTRY
    assert cfg.run.max_new_tokens > 0
    # Reports and W&B group a sweep's runs by this name; a paper's experiments live in its folder.
    assert cfg.run.experiment
    assert "/" in experiment or experiment in ("demo", "demo_tree")


@pytest.mark.parametrize("experiment", names("experiment"))
def test_every_sweep_job_composes_and_resolves(compose_cfg, experiment):
    """Each value of each swept key composes and resolves (a typo in a sweep fails here, not mid-run)."""
    from omegaconf import OmegaConf

    raw = OmegaConf.load(Path(PROJECT, "conf", "experiment", f"{experiment}.yaml"))
    params = OmegaConf.select(raw, "hydra.sweeper.params", default=None) or {}
    for key, values in params.items():
        for value in str(values).split(","):
            cfg = compose_cfg(f"experiment={experiment}", f"{key}={value}")
            resolved = OmegaConf.to_container(cfg, resolve=True)
            assert resolved["method"]["name"] in REGISTRY
            if "." in key:
                assert str(OmegaConf.select(cfg, key)) == value


@pytest.mark.parametrize("model", names("model"))
@pytest.mark.parametrize("method", names("method"))
def test_model_method_composes(compose_cfg, model, method):
    cfg = compose_cfg(f"model={model}", f"method={method}")
    assert cfg.model.name == model and cfg.method.name == method
    assert cfg.model.dtype in ("float32", "float16", "bfloat16")


def test_every_method_config_is_registered():
    assert set(names("method")) <= set(REGISTRY)


@pytest.mark.parametrize("dataset", names("dataset"))
def test_dataset_composes(compose_cfg, dataset):
    assert compose_cfg(f"dataset={dataset}").dataset.name == dataset


def test_token_recycling_tree_comes_from_tree_group(compose_cfg):
    cfg = compose_cfg("method=token_recycling")
    assert len(cfg.method.tree.paths) == 80


def test_run_cli_knows_nested_experiments():
    from bench.run.precheck import group_options

    assert "token_recycling/fig3a" in group_options("experiment")
    assert "dyspec/table1" in group_options("experiment")
    assert "propd/table3" in group_options("experiment")
