"""What the docs may name, checked: whatever README.md and docs/ name must exist (tests/test_docs.py runs it).

Read from every doc (README.md, docs/**/*.md and the READMEs beside the code), with nothing imported but the
report registry (no torch, no model):

- repository paths, in prose or code: `bench/core/engine.py`, `conf/experiment/dyspec/`, `tests/test_kv.py::test_x`
  (the test must exist too); `{a,b}` is expanded, `<placeholder>` and `*` must match at least one file. A bare
  file name in code (`draft_proposer.py`) must be the name of a file in the repository.
- generated outputs: a path under a git-ignored output folder (GENERATED: `results/`, `data/cache/`) is not looked
  for on disk, since only runs create it; instead every literal part of its names must occur in the code, configs
  or Makefile that write it (`results/figures/tr_fig3.png` needs "tr_fig" in a writer).
- Python modules and their attributes: `bench.core.kv`, `bench.core.kv.new_cache`, `Class.member` one level down.
- `make <target>` (a Makefile target; a bare `reproduce-*` too) and the Makefile variables passed to it (`MODEL=`
  must name a model config).
- config names: `group=option` for every config group under conf/ (`method=pld`, `experiment=dyspec/table1`,
  `dataset=a,b`, `tree@method.tree=...`), `run.*` / `paths.*` keys of conf/config.yaml and, in overrides,
  `method.*` / `model.*` / `tree.*` / `dataset.*` / `datastore.*` keys of some config of that group.
- `python -m <module>` of this project (a package with `__main__.py` or a module with a main guard) and the
  report artifact given to `python -m bench.report`.
- markdown links to files of the repository, and their `#anchors`.
- `SPECREPRO_*` / `SLURM_*` environment variables: read somewhere in the code or configs.
"""

from __future__ import annotations

import ast
import fnmatch
import functools
import os
import re
from pathlib import Path

import yaml

from bench.paths import PROJECT

ROOTS = ("bench", "methods", "data", "conf", "scripts", "notebooks", "tests", "docs", "results", ".ci")
MODULE_ROOTS = ("bench", "methods", "data", "tests")
# Outputs of runs and make steps, git-ignored: never committed, so a doc's path there is checked against the code
# that writes it, not the disk.
GENERATED = ("results/", "data/cache/")
# Paths in other projects that the docs cite and that happen to start with one of our folder names.
EXTERNAL = {"tests/testbed.py": "Sequoia's evaluation script, in Sequoia's repository"}
# Config options that Hydra and its installed launcher plugins register themselves (no file under conf/).
PLUGIN_OPTIONS = {"hydra/launcher": ("basic", "joblib", "submitit_local", "submitit_slurm")}
KEY_GROUPS = ("method", "model", "tree", "dataset", "datastore")  # `<group>.<key>=` overrides
SKIP_DIRS = {".git", ".venv", "__pycache__", ".pytest_cache", ".ruff_cache", "cache", "results"}


def docs() -> list[Path]:
    beside_code = [PROJECT / "data" / "README.md", PROJECT / "notebooks" / "README.md",
                   *sorted((PROJECT / "bench" / "report").glob("*/paper_tables/README.md"))]
    return [PROJECT / "README.md", *sorted((PROJECT / "docs").rglob("*.md")), *beside_code]


# ---- what the repository has --------------------------------------------------------------------------------

@functools.cache
def repo_files() -> list[str]:
    """Every file of the checkout (relative, /-separated), outputs and environments left out."""
    out = []
    for top, dirs, files in os.walk(PROJECT):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.endswith(".egg-info")]
        rel = Path(top).relative_to(PROJECT).as_posix()
        out += [f if rel == "." else f"{rel}/{f}" for f in files]
    return out


@functools.cache
def basenames() -> set[str]:
    return {f.rsplit("/", 1)[-1] for f in repo_files()}


@functools.cache
def writers() -> str:
    """The text of what writes outputs: the project's Python (tests aside), its configs and the Makefile."""
    files = [f for f in repo_files() if (f.endswith(".py") and not f.startswith("tests/"))
             or (f.startswith("conf/") and f.endswith(".yaml"))]
    return "\n".join((PROJECT / f).read_text() for f in [*files, "Makefile"])


@functools.cache
def makefile() -> tuple[set[str], set[str]]:
    """(targets, variables) of the Makefile, with the reproduce-* targets it includes (generated from the artifacts'
    declarations, bench/report/makefile.py)."""
    from bench.report.makefile import makefile as generated

    text = (PROJECT / "Makefile").read_text() + "\n" + generated()
    targets = set()
    for line in text.splitlines():
        m = re.match(r"^([A-Za-z0-9_.-][^:=#\s]*(?:[ \t]+[^:=#\s]+)*)[ \t]*:(?!=)", line)
        if m and not line.startswith((".PHONY", "\t")):
            targets.update(m.group(1).split())
    variables = set(re.findall(r"^([A-Za-z_]\w*)[ \t]*[:?+]?=", text, re.MULTILINE)) | set(re.findall(r"\$\((\w+)\)", text))
    return targets, variables


@functools.cache
def config_groups() -> tuple[str, ...]:
    """Config groups: folders of conf/ holding YAML files (`hydra/launcher` included), longest first."""
    groups = {f[len("conf/"):].rsplit("/", 1)[0] for f in repo_files()
              if f.startswith("conf/") and f.endswith(".yaml") and f.count("/") >= 2}
    groups = {g.split("/")[0] if g.startswith("experiment/") else g for g in groups}
    return tuple(sorted(groups, key=lambda g: (-len(g), g)))


@functools.cache
def group_keys(group: str) -> set[str]:
    """Every dotted key path of every config of a group (`controller.freeze_after_warmup`; list items by index, as
    Hydra overrides them: `eagle3.train.data.sources.0.train`)."""
    keys = set()

    def walk(node, prefix):
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for k, v in items:
            keys.add(prefix + str(k))
            walk(v, prefix + str(k) + ".")

    if group in ("run", "paths"):
        walk(yaml.safe_load((PROJECT / "conf" / "config.yaml").read_text())[group], "")
        return keys
    for path in sorted((PROJECT / "conf" / group).glob("*.yaml")):
        walk(yaml.safe_load(path.read_text()) or {}, "")
    return keys


@functools.cache
def report_artifacts() -> set[str]:
    from bench.report import registry
    from bench.report.__main__ import COMMANDS

    return set(registry.names()) | set(registry.aliases()) | set(COMMANDS)  # the CLI's store-level commands


@functools.cache
def top_level_names(path: Path) -> dict[str, set[str] | None]:
    """Names a module defines at top level; for a class, the names in its body (else None)."""
    names: dict[str, set[str] | None] = {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ClassDef):
            members = set()
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    members.add(item.name)
                elif isinstance(item, ast.Assign):
                    members |= {t.id for t in item.targets if isinstance(t, ast.Name)}
                elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    members.add(item.target.id)
            names[node.name] = members
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names[node.name] = None
        elif isinstance(node, ast.Assign):
            names.update({t.id: None for t in node.targets if isinstance(t, ast.Name)})
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names[node.target.id] = None
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update({(a.asname or a.name).split(".")[0]: None for a in node.names})
    return names


def module_file(parts: list[str]) -> Path | None:
    base = PROJECT.joinpath(*parts)
    if base.with_suffix(".py").is_file():
        return base.with_suffix(".py")
    if (base / "__init__.py").is_file():
        return base / "__init__.py"
    return None


# ---- checks, one per kind of reference ----------------------------------------------------------------------

def expand(token: str) -> list[str]:
    """`a{b,c}d` -> [abd, acd], every brace group; `{N}` (no comma) is a placeholder, as `<N>` is."""
    m = re.search(r"\{([^{}]*)\}", token)
    if not m:
        return [token]
    if "," not in m.group(1):
        return expand(token[:m.start()] + "<" + m.group(1) + ">" + token[m.end():])
    return [x for alt in m.group(1).split(",") for x in expand(token[:m.start()] + alt + token[m.end():])]


def as_glob(path: str) -> str:
    return re.sub(r"<[^<>]*>|\.\.\.", "*", path)


def check_generated(path: str) -> str | None:
    if path + "/" in GENERATED:
        return None
    root = next(r for r in GENERATED if path.startswith(r))
    for name in path[len(root):].split("/"):
        name = re.sub(r"(\.(md|csv|tex|png|json|jsonl|npy|pt|txt|gz|safetensors|lock))+$", "", name)
        for piece in re.split(r"<[^<>]*>|\*|\.\.\.", name):
            if len(piece.strip(".-_")) < 3:
                continue
            # a digit run may be written `{n}` in an f-string
            pattern = "".join(r"(?:\d+|\{[^{}]*\})" if p.isdigit() else re.escape(p)
                              for p in re.split(r"(\d+)", piece) if p)
            if not re.search(pattern, writers()):
                return f"generated path {path}: nothing in the code, configs or Makefile writes {piece!r}"
    return None


def check_path(token: str) -> str | None:
    token = token.rstrip(".,;:")
    file, _, test = token.partition("::")
    if file in EXTERNAL:
        return None
    for path in expand(file):
        if path.startswith(GENERATED) or path + "/" in GENERATED:  # `data/cache` alone names the output folder
            if problem := check_generated(path):
                return problem
            continue
        pattern = as_glob(path).rstrip("/")
        if any(c in pattern for c in "*?["):
            found = [f for f in repo_files() if fnmatch.fnmatch(f, pattern) or fnmatch.fnmatch(f, pattern + "/*")]
        else:
            found = [pattern] if (PROJECT / pattern).exists() else []
        if not found:
            return f"path {token}: no {path} in the repository"
        if path.endswith("/") and "*" not in pattern and not (PROJECT / pattern).is_dir():
            return f"path {token}: {path} is not a folder"
    if test and f"def {test}(" not in (PROJECT / file).read_text():
        return f"path {token}: no test {test} in {file}"
    return None


FILE_SUFFIXES = {"md", "py", "yaml", "json", "jsonl", "csv", "tex", "png", "txt", "pt", "npy", "gz"}


def check_module(dotted: str) -> str | None:
    parts = dotted.split(".")
    if parts[-1] in FILE_SUFFIXES:
        return None  # a file name (`data.md`), not a module
    for n in range(len(parts), 0, -1):
        path = module_file(parts[:n])
        if path is None:
            continue
        rest = parts[n:]
        if not rest:
            return None
        names = top_level_names(path)
        if rest[0] not in names:
            return f"module {dotted}: {'.'.join(parts[:n])} has no {rest[0]}"
        members = names[rest[0]]
        if len(rest) > 1 and members is not None and rest[1] not in members:
            return f"module {dotted}: {rest[0]} has no member {rest[1]}"
        return None
    return f"module {dotted}: no such module"


def check_make(args: str) -> list[str]:
    targets, variables = makefile()
    values = {"MODEL": "model", "MBPP_MODEL": "model", "HYDRA_LAUNCHER": "hydra/launcher", "LOGGER": "logger"}
    out = []
    for arg in args.split():
        if arg.startswith("-"):
            continue
        if "=" in arg:
            var, value = arg.split("=", 1)
            if var not in variables:
                out.append(f"make variable {var}: not in the Makefile")
            elif (var in values and value and not re.search(r"[<$*]|\.\.\.", value)
                  and not (PROJECT / "conf" / values[var] / f"{value}.yaml").is_file()):
                out.append(f"make {arg}: no conf/{values[var]}/{value}.yaml")
        elif not fnmatch.filter(targets, as_glob(arg)):
            out.append(f"make target {arg}: not in the Makefile")
    return out


def check_option(group: str, values: str) -> list[str]:
    out = []
    for value in values.split(","):
        if not value or value == "null" or re.search(r"[<$*]|\.\.\.", value):
            continue
        if value not in PLUGIN_OPTIONS.get(group, ()) and not (PROJECT / "conf" / group / f"{value}.yaml").is_file():
            out.append(f"config {group}={value}: no conf/{group}/{value}.yaml")
    return out


def check_key(group: str, key: str) -> str | None:
    if key in group_keys(group) or re.search(r"[<*]", key):
        return None
    return f"config key {group}.{key}: in no config of conf/{'config.yaml' if group in ('run', 'paths') else group}"


def check_entry_point(module: str, args: str) -> list[str]:
    if module.split(".")[0] not in MODULE_ROOTS:
        return []  # pytest, pip, ...
    parts = module.split(".")
    base = PROJECT.joinpath(*parts)
    if not ((base / "__main__.py").is_file()
            or (base.with_suffix(".py").is_file() and "__main__" in base.with_suffix(".py").read_text())):
        return [f"python -m {module}: no such entry point"]
    words = [a for a in args.split() if not a.startswith("-")]
    if (module == "bench.report" and words and not re.search(r"[<{]|\.\.\.", words[0])
            and words[0] not in report_artifacts()):
        return [f"python -m bench.report {words[0]}: no such report artifact"]
    return []


def slug(heading: str) -> str:
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(text: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens, repeats numbered."""
    seen: dict[str, int] = {}
    out = set()
    for line in FENCE.sub("", text).splitlines():
        if m := re.match(r"^#{1,6}\s+(.*)", line):
            s = slug(m.group(1))
            out.add(s if s not in seen else f"{s}-{seen[s]}")
            seen[s] = seen.get(s, 0) + 1
    return out


def check_link(target: str, doc: Path, text: str) -> str | None:
    if re.match(r"^[a-z]+:", target):
        return None  # http(s), mailto
    file, _, anchor = target.partition("#")
    path = (doc.parent / file).resolve() if file else doc
    if file:
        if PROJECT.resolve() not in path.parents and path != PROJECT.resolve():
            return f"link {target}: outside the repository"
        if not path.exists():
            return f"link {target}: no {path.relative_to(PROJECT.resolve())}"
    if anchor and path.suffix == ".md" and anchor not in anchors(path.read_text() if file else text):
        return f"link {target}: no heading #{anchor}"
    return None


# ---- finding references in a doc ----------------------------------------------------------------------------

FENCE = re.compile(r"^```[^\n]*\n.*?^```[ \t]*$", re.MULTILINE | re.DOTALL)
INLINE = re.compile(r"`([^`\n]+)`")
SEGMENT = r"(?:[\w.*<>+@-]|\{[^{}\s]*\})+"
PATH = re.compile(rf"(?<![\w./$<>-])((?:{'|'.join(re.escape(r) for r in ROOTS)})/(?:{SEGMENT}/?)*(?:::\w+)?)")
BARE = re.compile(r"(?<![\w./$<>{-])([\w-]+\.(?:py|yaml|md))(?![\w/.])")
MODULE = re.compile(rf"(?<![\w./$-])((?:{'|'.join(MODULE_ROOTS)})(?:\.[A-Za-z_]\w*)+)(?![\w/])")
MAKE = re.compile(r"(?<![\w$(/.-])make((?:[ \t]+[^\s;&|#`)]+)*)")
PYTHON_M = re.compile(r"python3?[ \t]+-m[ \t]+([\w.]+)((?:[ \t]+[^\s;&|#`]+)*)")
RUN_KEY = re.compile(r"(?<![\w./$-])(run|paths)\.(\w+)")
OVERRIDE_KEY = re.compile(rf"(?<![\w./$-])[+~]?({'|'.join(KEY_GROUPS)})\.([\w.]+)=")
LINK = re.compile(r"\]\(([^)\s]+)\)")
ENV = re.compile(r"\b((?:SPECREPRO|SLURM)_[A-Z_]+)\b")


def code_of(text: str) -> list[str]:
    """Fenced blocks, their shell comments left out (prose, checked for paths and modules only), and inline code."""
    blocks = [re.sub(r"(^|\s)#.*", "", m.group(0)) for m in FENCE.finditer(text)]
    return blocks + INLINE.findall(FENCE.sub("", text))


def problems(text: str, doc: Path) -> list[str]:
    out: list[str | None] = []
    out += [check_path(m) for m in PATH.findall(text)]
    out += [check_module(m) for m in MODULE.findall(text)]
    out += [check_key(g, k) for g, k in RUN_KEY.findall(text)]
    out += [check_link(t, doc, text) for t in LINK.findall(FENCE.sub("", text))]
    out += [f"environment variable {v}: read nowhere" for v in ENV.findall(text) if v not in writers()]
    groups = "|".join(re.escape(g) for g in config_groups())
    option = re.compile(rf"(?<![\w./$-])[+~]?({groups})(?:@[\w.]+)?=([^\s`'\")\]]+)")
    for code in code_of(text):
        out += [f"file {b}: no file of that name in the repository" for b in BARE.findall(code)
                if b not in basenames() and b not in {e.rsplit('/', 1)[-1] for e in EXTERNAL}]
        for args in MAKE.findall(code):
            out += check_make(args)
        if re.fullmatch(r"reproduce-[\w<>-]+", code):  # a paper target named without `make`
            out += check_make(code)
        for module, args in PYTHON_M.findall(code):
            out += check_entry_point(module, args)
        for group, values in option.findall(code):
            out += check_option(group, values)
        out += [check_key(g, k) for g, k in OVERRIDE_KEY.findall(code)]
    return sorted({p for p in out if p})
