"""The project code a stage depends on, computed from what its module imports.

A stage's code is the transitive closure of project imports (module level and inside functions, and modules
named in strings as `importlib` takes them, "cogrpo.rewards.checker:strict") from its module, restricted to
the packages that compute results: the library `cogrpo`, `tasks` and `flows`.
`adapters` (logging, caching, progress) and `pipelines` (entry points) never change a result and stay out,
so editing them reruns nothing. Both `dvc.yaml`'s deps and the store's cache key derive from this list.
"""

from __future__ import annotations

import ast
import hashlib
import re
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_NAMED = re.compile(r"^(cogrpo|tasks|flows)(\.\w+)+(:\w+)?$")
PACKAGES = {"cogrpo": Path("src/cogrpo"), "tasks": Path("tasks"), "flows": Path("flows")}


def module_file(name: str, root: Path = ROOT) -> Path | None:
    """The file (relative to root) of a project module, or None for anything else."""
    top, *rest = name.split(".")
    if top not in PACKAGES:
        return None
    base = PACKAGES[top].joinpath(*rest)
    for candidate in (base / "__init__.py", base.with_suffix(".py")):
        if (root / candidate).is_file():
            return candidate
    return None


def _imported(path: Path, module: str, root: Path) -> set[str]:
    """Project modules one file imports, with the packages on their way (their __init__ runs too)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(ast.parse((root / path).read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parent + ([base] if base else []))
            names.add(base)
            names |= {f"{base}.{a.name}" for a in node.names}  # `from pkg import module`
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _NAMED.match(node.value):
            names.add(node.value.partition(":")[0])  # imported later by name (a registry entry)
    out = set()
    for name in names:
        parts = name.split(".")
        out |= {".".join(parts[:i]) for i in range(1, len(parts) + 1)}
    return {n for n in out if module_file(n, root)}


def closure(modules: tuple[str, ...], root: Path = ROOT) -> list[str]:
    """Sorted files (relative to root, POSIX) of the modules and every project module they import, transitively."""
    seen: set[str] = set()
    todo = [m for m in modules if module_file(m, root)]
    missing = [m for m in modules if not module_file(m, root)]
    if missing:
        raise ValueError(f"not a project module: {missing}")
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        todo += _imported(module_file(name, root), name, root) - seen
    return sorted(module_file(n, root).as_posix() for n in seen)


@cache
def code_hash(modules: tuple[str, ...], root: Path = ROOT) -> str:
    """sha256 over the names and bytes of the closure's files (read once per process)."""
    h = hashlib.sha256()
    for f in closure(modules, root):
        h.update(f.encode() + b"\0" + (root / f).read_bytes())
    return h.hexdigest()
