"""The layout's rules, checked on the source (ast; nothing is imported or run).

- No import cycles between the project's modules (lazy imports inside functions and importlib.import_module of a
  literal module name count too).
- The engine core (bench/core) imports nothing from methods/, the runner (bench.run), the reports
  (bench.report) or the model loaders (bench.models): everything else builds on it, not the reverse.
- Reports import neither methods/ nor the runner's model-loading side (only bench.run.store and bench.metrics);
  the page and its evidence (bench/page) sit above them, and no report imports it.
- The cost model (bench/cost) imports nothing of the runner's, the model loaders nothing of the cost model's (what
  both need lies below: bench.metrics, bench.shapes); the machine's checks (bench/check) sit above both.
- Training code (bench/train) is imported only by scripts/ and tests/, and imports neither methods/ nor the
  reports.
- No method imports another method's package or module (the methods of methods/__init__.py's REGISTRY, grouped
  by their package under methods/); what several use lives in methods/shared/, which imports no method.
- No private (underscore) name is imported from another module.
- No source file over 450 lines; no run of 6 identical code lines in two source files.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

from bench.paths import PROJECT

PACKAGES = ("bench", "methods", "data")
SOURCE_DIRS = (*PACKAGES, "scripts", "notebooks")


def source_files() -> list[Path]:
    return sorted(p for d in SOURCE_DIRS for p in (PROJECT / d).rglob("*.py") if "cache" not in p.parts)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PROJECT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


MODULES = {module_name(p): p for p in source_files()}


def imports(path: Path) -> list[tuple[str, list[str]]]:
    """(imported project module, names taken from it) for every import statement, lazy ones included, and every
    importlib.import_module of a literal name (a registry's: a loop through it is a loop too)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) == "import_module":
            arg = node.args[0] if node.args else None
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value.split(".")[0] in PACKAGES:
                found.append((arg.value, []))
        elif isinstance(node, ast.Import):
            found += [(a.name, []) for a in node.names if a.name.split(".")[0] in PACKAGES]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] not in PACKAGES:
                continue
            for alias in node.names:  # `from bench.run import store` imports the module bench.run.store
                sub = f"{node.module}.{alias.name}"
                found.append((sub, []) if sub in MODULES else (node.module, [alias.name]))
    return found


def graph() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = defaultdict(set)
    for mod, path in MODULES.items():
        for target, _ in imports(path):
            if target in MODULES and target != mod:
                edges[mod].add(target)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(set(edges) | {w for ws in edges.values() for w in ws}):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycles():
    assert cycles(graph()) == []


def test_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


FORBIDDEN = {
    "bench.core": ("methods", "bench.run", "bench.report", "bench.models", "bench.perf", "bench.check", "bench.cost"),
    "bench.run": ("bench.report", "bench.perf", "bench.check", "bench.cost"),
    "bench.cost": ("methods", "bench.run", "bench.report", "bench.models", "bench.perf", "bench.check"),
    "bench.report": ("methods", "bench.run.runner", "bench.run.__main__", "bench.models", "bench.perf", "bench.check",
                     "bench.page"),
    "bench.page": ("methods", "bench.run.runner", "bench.run.__main__", "bench.models", "bench.perf", "bench.check"),
    "bench.check": ("bench.report", "bench.perf"),  # the machine's checks: above the runner and the cost model
    "methods": ("bench.run", "bench.report", "bench.check"),
    "bench.models": ("methods", "bench.run", "bench.report", "bench.cost", "bench.check"),
    "bench.metrics": ("bench.run", "bench.cost", "bench.report", "bench.models", "methods"),  # below all of them
    "bench.shapes": ("bench.cost", "bench.models"),  # what both read
    "data": ("bench", "methods"),
}


@pytest.mark.parametrize("room", sorted(FORBIDDEN))
def test_rooms_import_only_downwards(room):
    bad = []
    for mod, path in MODULES.items():
        if mod != room and not mod.startswith(room + "."):
            continue
        for target, _ in imports(path):
            if any(target == f or target.startswith(f + ".") for f in FORBIDDEN[room]):
                bad.append(f"{mod} -> {target}")
    assert bad == []


def test_no_private_names_imported_across_modules():
    bad = [f"{mod}: {target}.{name}" for mod, path in MODULES.items() for target, names in imports(path)
           for name in names if name.startswith("_") and not name.startswith("__")]
    assert bad == []


def test_no_source_file_over_450_lines():
    long = {str(p.relative_to(PROJECT)): n for p in source_files() if (n := len(p.read_text().splitlines())) > 450}
    assert long == {}


def code_lines(path: Path) -> list[tuple[int, str]]:
    """Lines that carry code: stripped, without blanks, comments and import lines (shared imports are fine)."""
    out = []
    for i, line in enumerate(path.read_text().splitlines(), start=1):
        s = line.strip()
        if s and not s.startswith(("#", "import ", "from ", ")", "]", "}")) and len(s) > 3:
            out.append((i, s))
    return out


def test_no_six_line_block_repeated_across_source_files():
    seen: dict[tuple, str] = {}
    repeats = []
    for path in source_files():
        lines = code_lines(path)
        for k in range(len(lines) - 5):
            block = tuple(s for _, s in lines[k:k + 6])
            where = f"{path.relative_to(PROJECT)}:{lines[k][0]}"
            first = seen.setdefault(block, where)
            if first.split(":")[0] != where.split(":")[0]:
                repeats.append(f"{first} == {where}")
    assert repeats == []


def test_training_code_only_in_its_room():
    """bench.train (`make draft`, `make heads`) is a room of its own: outside it only scripts/ and tests/ import it
    (tests are not in MODULES), and it builds on the core, the models and data/, never on methods/ or the reports."""
    def inside(mod: str, room: str) -> bool:
        return mod == room or mod.startswith(room + ".")

    bad = []
    for mod, path in MODULES.items():
        for target, _ in imports(path):
            if inside(target, "bench.train") and not any(inside(mod, r) for r in ("bench.train", "scripts")):
                bad.append(f"{mod} -> {target}")
            if inside(mod, "bench.train") and any(inside(target, r) for r in ("methods", "bench.report")):
                bad.append(f"{mod} -> {target}")
    assert bad == []


def method_groups() -> set[str]:
    """The methods' top-level packages under methods/, read from REGISTRY in methods/__init__.py: methods.medusa
    for "methods.medusa.proposer:Medusa", methods.lookahead for the one-module method "methods.lookahead:...". A
    family of methods in one package (methods.draft_model) is one group: its modules may share code."""
    body = ast.parse((PROJECT / "methods" / "__init__.py").read_text()).body
    registry = next(ast.literal_eval(node.value) for node in body if isinstance(node, ast.Assign)
                    and any(isinstance(t, ast.Name) and t.id == "REGISTRY" for t in node.targets))
    return {".".join(spec.split(":")[0].split(".")[:2]) for spec in registry.values()}


def cross_method_imports(edges: dict[str, set[str]], groups: set[str]) -> list[str]:
    """`module -> target` for every import by a module under methods/ of a method group not its own. Modules in no
    group (methods/shared/) may import no method at all, else they would carry one method into another."""
    def group(mod: str) -> str | None:
        return next((g for g in groups if mod == g or mod.startswith(g + ".")), None)

    return sorted(f"{mod} -> {target}" for mod, targets in edges.items() if mod.startswith("methods.")
                  for target in targets if group(target) not in (None, group(mod)))


def test_no_method_imports_another():
    groups = method_groups()
    assert {"methods.draft_model", "methods.lookahead", "methods.medusa", "methods.propd"} <= groups
    assert cross_method_imports(graph(), groups) == []


def test_cross_method_checker_finds_planted_imports():
    groups = {"methods.lookahead", "methods.medusa", "methods.propd"}
    edges = {"methods.propd.proposer": {"methods.medusa.proposer", "methods.propd.prune", "methods.shared.heads",
                                        "bench.core.tree"},
             "methods.shared.lookahead": {"methods.lookahead"},
             "methods.lookahead": {"methods.shared.lookahead"}}
    assert cross_method_imports(edges, groups) == ["methods.propd.proposer -> methods.medusa.proposer",
                                                   "methods.shared.lookahead -> methods.lookahead"]
