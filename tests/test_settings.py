"""Method settings (bench/core/settings.py, Method.check_settings): what the declarations accept and refuse, and that
every shipped method config and sweep job passes them (tests/test_configs.py, where each is composed anyway).
The command line's rows per method are in tests/test_bad_inputs.py (METHOD_CASES)."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from bench.core.proposer import Method
from bench.core.settings import (
    FLAG,
    SECTION,
    Rule,
    check_settings,
    choice,
    declare,
    integer,
    integers,
    number,
)
from bench.errors import ConfigError

DECLARED = {"depth": integer(1), "p": number(0, 1, above=True, optional=True), "mode": choice("a", "b"),
            "on": FLAG, "sizes": integers(1), "size": integer(1, words=("auto",)), "tree": SECTION,
            "cache.beta": integer(1)}
RULES = (Rule("depth <= cache.beta", ("depth", "cache.beta"), lambda d, b: d <= b),)


def check(**cfg) -> None:
    check_settings("toy", OmegaConf.create(cfg), DECLARED, RULES)


@pytest.mark.parametrize("cfg,message", [
    ({"depth": 0}, "method 'toy': depth must be an integer >= 1, got 0"),
    ({"depth": 2.0}, "depth must be an integer >= 1, got 2.0"),
    ({"depth": True}, "depth must be an integer >= 1, got True"),
    ({"p": 0.0}, "p must be a number in (0, 1] or null, got 0.0"),
    ({"p": 1.5}, "p must be a number in (0, 1] or null, got 1.5"),
    ({"mode": "c"}, "mode must be one of a, b, got 'c'"),
    ({"on": "yes"}, "on must be true or false, got 'yes'"),
    ({"sizes": []}, "sizes must be a non-empty list of integers, each >= 1, got []"),
    ({"sizes": [4, 0]}, "sizes must be a non-empty list of integers, each >= 1, got [4, 0]"),
    ({"size": "big"}, "size must be an integer >= 1 or auto, got 'big'"),
    ({"cache": {"beta": 0}}, "cache.beta must be an integer >= 1, got 0"),
    ({"cache": {"bta": 3}}, "method 'toy' has no setting 'cache.bta' (its settings: cache.beta, depth,"),
    ({"dept": 3}, "method 'toy' has no setting 'dept'"),
    ({"depth": 4, "cache": {"beta": 3}}, "needs depth <= cache.beta, got depth=4, cache.beta=3"),
])
def test_refused_with_method_key_value_and_what_is_allowed(cfg, message):
    with pytest.raises(ConfigError) as err:
        check(**cfg)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_accepted_values_and_missing_keys():
    check(name="toy", depth=3, p=None, mode="b", on=False, sizes=[1, 4], size="auto", tree={"paths": [[0]], "x": 1},
          cache={"beta": 3})
    check(size=64, p=1)  # an int is a number; missing keys are the method's own business
    check()


def test_a_subclass_checks_its_bases_declarations_too():
    class Base(Method):
        settings = declare({"depth": integer(1)})

    class Child(Base):
        settings = declare({"width": integer(1)})
        requires = (Rule("width <= depth", ("width", "depth"), lambda w, d: w <= d),)

    Child.check_settings(OmegaConf.create({"name": "child", "depth": 4, "width": 2}))
    Child.check_settings(None)  # built without a config (tests)
    for cfg, message in (({"depth": 0, "width": 1}, "depth must be"), ({"depth": 2, "width": 3}, "width <= depth"),
                         ({"depth": 2, "height": 1}, "no setting 'height'")):
        with pytest.raises(ConfigError, match=message):
            Child.check_settings(OmegaConf.create({"name": "child", **cfg}))
        with pytest.raises(ConfigError, match=message):
            Child(OmegaConf.create({"name": "child", **cfg}), None)  # built: the same check
