"""Shared fixtures: the embedded model is loaded once per test session (a few seconds once cached)."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir

from bench.provenance import ROOT


def compose_cfg(*overrides: str):
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        return compose("config", overrides=list(overrides))


@pytest.fixture(scope="session")
def smollm():
    from bench.run import get_bundle

    return get_bundle(compose_cfg("model=smollm2-135m").model)
