"""bench.run.compose.compose_config: one composition per override list and state of conf/, a copy per caller
(its own module: tests/test_configs.py holds Hydra initialized for its compositions)."""

from __future__ import annotations

import os
import shutil

from bench.paths import PROJECT


def test_a_composition_is_reused_as_a_copy_until_conf_changes(tmp_path, monkeypatch):
    """bench.run.compose.compose_config composes each override list once per state of conf/: a caller's change
    never reaches the next caller, and an edited config file is composed anew."""
    from bench.run import compose

    conf = tmp_path / "conf"
    shutil.copytree(PROJECT / "conf", conf)
    monkeypatch.setattr(compose, "CONF", conf)
    first = compose.compose_config(["method=ar"])
    assert first.run.limit is None
    first.run.limit = 3  # (a run's own change)
    assert compose.compose_config(["method=ar"]).run.limit is None
    text = (conf / "config.yaml").read_text().replace("limit: null ", "limit: 5 ", 1)
    (conf / "config.yaml").write_text(text)
    stat = (conf / "config.yaml").stat()
    os.utime(conf / "config.yaml", ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # newer than any file copied
    assert compose.compose_config(["method=ar"]).run.limit == 5
