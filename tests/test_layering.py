"""DESIGN.md §4: the library imports no orchestration; imports point only downward."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ORCHESTRATION = {"prefect", "mlflow", "dvc"}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_library_imports_no_orchestration():
    files = list((ROOT / "src" / "cogrpo").rglob("*.py"))
    assert files
    for f in files:
        bad = _imports(f) & (ORCHESTRATION | {"tasks", "flows", "pipelines"})
        assert not bad, f"{f.relative_to(ROOT)} imports {bad}"


def test_layers_point_downward():
    above = {"tasks": {"flows", "pipelines"}, "flows": {"pipelines"}}
    for layer, forbidden in above.items():
        for f in (ROOT / layer).rglob("*.py"):
            bad = _imports(f) & forbidden
            assert not bad, f"{f.relative_to(ROOT)} imports {bad}"
