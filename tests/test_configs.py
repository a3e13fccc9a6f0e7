"""Every config composes: each experiment and each sweep job, every model, dataset and method, and (by the
independence of the model and method groups, checked) every model x method combination. Every composed method
config and sweep job also passes its method's settings check (bench.run.validate.check_method), so declaring a
setting never refuses a shipped run."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.paths import PROJECT
from bench.run.validate import check_method
from methods import REGISTRY


@pytest.fixture(scope="module")
def compose_cfg():
    """bench.run.compose.compose_config's composition, with Hydra initialized once for the module's compositions
    (initializing per call is a third of each one's time)."""
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
    check_method(cfg)
    assert cfg.run.max_new_tokens > 0
    # Reports and W&B group a sweep's runs by this name; a paper's experiments live in its folder.
    assert cfg.run.experiment
    assert "/" in experiment or experiment in ("demo", "demo_tree")


# The experiments behind a phase breakdown (Token Recycling Figure 4, DySpec Figure 4, Post-use & Pre-cut Table 9):
# on a GPU their phases are each phase's own time only with a device sync at every boundary (issue 40, defect 6).
BREAKDOWN_EXPERIMENTS = ("token_recycling/fig4", "dyspec/fig4", "holistic/table9")


def test_breakdown_experiments_sync_phases(compose_cfg):
    for experiment in BREAKDOWN_EXPERIMENTS:
        assert compose_cfg(f"experiment={experiment}").run.sync_phases is True, experiment
    # DySpec's breakdown has its own runs: Table 1's stay timed as the paper's and HF generate are.
    assert compose_cfg("experiment=dyspec/table1").run.sync_phases is False
    assert compose_cfg("experiment=dyspec/fig4").run.variant == "breakdown"


@pytest.mark.slow  # every experiment composes in `make test` (test_experiment_composes); each swept value here
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
            check_method(cfg)
            if "." in key:
                assert str(OmegaConf.select(cfg, key)) == value


@pytest.mark.parametrize("model", names("model"))
def test_model_composes(compose_cfg, model):
    cfg = compose_cfg(f"model={model}")
    assert cfg.model.name == model
    assert cfg.model.dtype in ("float32", "float16", "bfloat16")


@pytest.mark.parametrize("method", names("method"))
def test_method_composes(compose_cfg, method):
    cfg = compose_cfg(f"method={method}")
    assert cfg.method.name == method
    check_method(cfg)


def test_every_model_composes_with_every_method():
    """Every model x method pair composes when every model and every method does (the two tests above), as long as
    neither group can change how the other composes: no model or method config has a package header (each writes
    its own node only), no model config has a defaults list, and no method's defaults list picks an option
    through an interpolation (which could read the model). Checked here rather than by composing all ~320 pairs
    (~50 s of the suite); a config that breaks this fails here and has to be composed with every partner."""
    from omegaconf import OmegaConf

    for group in ("model", "method"):
        for name in names(group):
            path = Path(PROJECT, "conf", group, f"{name}.yaml")
            assert "@package" not in path.read_text(), f"{group}/{name} has a package header"
            defaults = OmegaConf.load(path).get("defaults") or []
            if group == "model":
                assert not defaults, f"model/{name} has a defaults list"
            assert not [d for d in defaults if "${" in str(d)], f"{group}/{name}: an interpolated default"


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
