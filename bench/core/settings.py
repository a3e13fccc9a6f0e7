"""A method's settings, declared once beside its code and checked before anything is loaded.

A method class declares `settings = {"budget": integer(1), "algorithm": choice("greedy", "threshold"), ...}`
(dotted keys reach into a section: "cache.beta") and, for combinations no single value can judge, `requires =
(Rule("min_span <= max_span", ("min_span", "max_span"), lambda lo, hi: lo <= hi),)`. `check_settings` reads a
method config against the declarations of the class and its bases: a value of the wrong type or range, a word that
is not one of the choices, a key no class declares, or a broken rule is one ConfigError naming the method, the key,
the value and what is allowed. A key missing from the config is not checked here: the method's own default (or its
own error) applies, as before.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from bench.errors import ConfigError

MISSING = object()


@dataclass(frozen=True)
class Setting:
    kind: str  # integer | number | flag | choice | text | section | integers | numbers
    low: float | None = None
    high: float | None = None
    open_low: bool = False  # low itself is not allowed (draft_temperature > 0)
    words: tuple[str, ...] = ()  # the choices; for a number, words also allowed instead (sequoia size: auto)
    optional: bool = False  # null allowed

    def accepts(self, value) -> bool:
        if value is None:
            return self.optional
        if isinstance(value, str) and value in self.words:
            return True
        if self.kind in ("integers", "numbers"):
            if isinstance(value, str) or not isinstance(value, Sequence) or len(value) == 0:
                return False
            item = Setting(self.kind[:-1], self.low, self.high, self.open_low)
            return all(item.accepts(v) for v in value)
        if self.kind == "flag":
            return isinstance(value, bool)
        if self.kind == "text":
            return isinstance(value, str) and value != ""
        if self.kind == "section":
            return isinstance(value, Mapping)
        if self.kind == "choice" or isinstance(value, bool):
            return False
        if not isinstance(value, int if self.kind == "integer" else int | float):
            return False
        if self.low is not None and (value <= self.low if self.open_low else value < self.low):
            return False
        return self.high is None or value <= self.high

    def allowed(self) -> str:
        """What the setting takes, in words (the end of the error line)."""
        if self.kind == "choice":
            text = "one of " + ", ".join(self.words)
        elif self.kind in ("flag", "text", "section"):
            text = {"flag": "true or false", "text": "a non-empty string", "section": "a mapping"}[self.kind]
        else:
            noun = {"integer": "an integer", "number": "a number", "integers": "a non-empty list of integers",
                    "numbers": "a non-empty list of numbers"}[self.kind]
            lo = "" if self.low is None else f"{'(' if self.open_low else '['}{self.low:g}"
            if self.low is not None and self.high is not None:
                text = f"{noun} in {lo}, {self.high:g}]"
            elif self.low is not None:
                text = f"{noun} {'>' if self.open_low else '>='} {self.low:g}"
            else:
                text = noun if self.high is None else f"{noun} <= {self.high:g}"
            if self.kind.endswith("s") and self.low is not None:
                text = text.replace(" >", ", each >").replace(" in ", ", each in ")
            text += "".join(f" or {w}" for w in self.words)
        return text + (" or null" if self.optional else "")


def integer(low: int | None = None, high: int | None = None, optional: bool = False, words=()) -> Setting:
    return Setting("integer", low, high, words=tuple(words), optional=optional)


def number(low: float | None = None, high: float | None = None, above: bool = False, optional: bool = False) -> Setting:
    """A real number in [low, high]; above=True excludes low itself."""
    return Setting("number", low, high, open_low=above, optional=optional)


def integers(low: int | None = None) -> Setting:
    return Setting("integers", low)


def numbers(low: float | None = None, high: float | None = None, above: bool = False) -> Setting:
    return Setting("numbers", low, high, open_low=above)


def choice(*words: str, optional: bool = False) -> Setting:
    return Setting("choice", words=words, optional=optional)


FLAG = Setting("flag")
TEXT = Setting("text")
OPTIONAL_TEXT = Setting("text", optional=True)
SECTION = Setting("section")  # checked by the code that reads it (a tree config, ...)


def declare(table: dict[str, Setting]) -> Mapping[str, Setting]:
    """A class's declarations, read-only (they are shared by every instance and subclass)."""
    return MappingProxyType(dict(table))


@dataclass(frozen=True)
class Rule:
    """A combination of settings: `test` takes the values of `keys` in order; `says` is the requirement in words."""

    says: str
    keys: tuple[str, ...]
    test: Callable[..., bool]


def lookup(cfg, key: str):
    """cfg's value at a dotted key, MISSING where a part is absent (mappings and OmegaConf configs alike)."""
    node = cfg
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return MISSING
        node = node.get(part)
    return node


def declared_keys(settings: Mapping[str, Setting]) -> set[str]:
    """Every declared dotted key and each of its parent sections ("cache" for "cache.beta")."""
    out = set()
    for key in settings:
        parts = key.split(".")
        out.update(".".join(parts[: i + 1]) for i in range(len(parts)))
    return out


def config_keys(cfg, prefix: str = "", sections: frozenset = frozenset()) -> list[str]:
    """cfg's keys, dotted; a declared SECTION is a leaf (its content is its reader's)."""
    out = []
    for key in cfg:
        path = f"{prefix}{key}"
        out.append(path)
        if path not in sections and isinstance(cfg, Mapping) and isinstance(cfg.get(key), Mapping):
            out += config_keys(cfg.get(key), path + ".", sections)
    return out


def check_settings(method: str, cfg, settings: Mapping[str, Setting], rules: Sequence[Rule] = ()) -> None:
    """ConfigError (one line) for the first setting of `cfg` (a method config) that `settings`/`rules` refuse."""
    known = declared_keys(settings) | {"name"}
    sections = frozenset(k for k, s in settings.items() if s.kind == "section")
    for key in config_keys(cfg, sections=sections):
        if key not in known:
            names = ", ".join(sorted(settings)) or "none"
            raise ConfigError(f"method '{method}' has no setting '{key}' (its settings: {names})")
    for key, setting in settings.items():
        value = lookup(cfg, key)
        if value is not MISSING and not setting.accepts(value):
            raise ConfigError(f"method '{method}': {key} must be {setting.allowed()}, got {value!r}")
    for rule in rules:
        values = [lookup(cfg, k) for k in rule.keys]
        if MISSING not in values and not rule.test(*values):
            got = ", ".join(f"{k}={v!r}" for k, v in zip(rule.keys, values))
            raise ConfigError(f"method '{method}': needs {rule.says}, got {got}")
