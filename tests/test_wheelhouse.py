"""`make wheelhouse` + `make setup WHEELS=<dir>`: the project installs from a wheel folder with no index reachable.

Faithful but fast (~20 s, not the minutes and ~400 MB of the real wheelhouse): the wheel folder holds what an
offline `pip install -e .` of the checkout needs beyond the packages already on the node, here setuptools (the
project's build backend: pip builds the editable install in an isolated environment that it fills from the
folder, the step that breaks first without an index) and one pure-Python dependency (tabulate), both fetched by
`pip download` as `make wheelhouse` fetches them (PyPI is reachable here and in CI; without it the test skips).
The install runs `make setup WHEELS=...`'s pip command, `--no-index --find-links`, into a fresh
`--system-site-packages` venv, with `--no-deps` because this venv, unlike a GPU node, has no torch/transformers
of its own for the other dependencies to rest on. Then the venv's python, started outside the checkout, imports
the dependency and the project from the copy it was installed from (editable: conf/ stays beside the code).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv
from importlib.metadata import version
from pathlib import Path

import pytest

from bench.paths import PROJECT


def pip(python, *args, **kwargs):
    return subprocess.run([str(python), "-m", "pip", "-q", "--disable-pip-version-check", *args],
                          check=False, capture_output=True, text=True, timeout=120, **kwargs)


def test_offline_install_from_a_wheel_folder(tmp_path):
    wheels = tmp_path / "wheels"
    got = pip(sys.executable, "download", "--no-deps", "-d", str(wheels), "setuptools>=68",
              f"tabulate=={version('tabulate')}")
    if got.returncode != 0:
        pytest.skip(f"PyPI not reachable: {got.stderr.strip().splitlines()[-1:]}")
    # The checkout's Python packages and build files (not results/, data/cache/, .venv/): what `pip install -e`
    # reads, copied so the editable build's files land in tmp_path.
    src = tmp_path / "src"
    ignore = shutil.ignore_patterns("__pycache__", "cache", "*.egg-info")
    for name in ("bench", "methods", "data"):
        shutil.copytree(PROJECT / name, src / name, ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(PROJECT / name, src / name)
    venv.create(tmp_path / "venv", system_site_packages=True, with_pip=True)
    python = tmp_path / "venv" / "bin" / "python"
    done = pip(python, "install", "--no-index", "--find-links", str(wheels), "--no-deps", "-e", str(src), "tabulate")
    assert done.returncode == 0, done.stderr
    clean = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # a PYTHONPATH naming a checkout wins
    check = subprocess.run([str(python), "-c", "import tabulate, bench.paths; print(bench.paths.PROJECT)"],
                           check=False, capture_output=True, text=True, cwd=tmp_path, timeout=60, env=clean)
    assert check.returncode == 0, check.stderr
    assert Path(check.stdout.strip()) == src
