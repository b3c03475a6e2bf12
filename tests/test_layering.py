"""DESIGN.md §3: the library imports no orchestration; imports point only downward."""

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
    above = {"adapters": {"tasks", "flows", "pipelines"}, "tasks": {"flows", "pipelines", "adapters"},
             "flows": {"pipelines"}}
    for layer, forbidden in above.items():
        for f in (ROOT / layer).rglob("*.py"):
            bad = _imports(f) & forbidden
            assert not bad, f"{f.relative_to(ROOT)} imports {bad}"


def test_every_library_module_imports_first_in_a_fresh_interpreter():
    """No circular import hides behind a lucky import order: each module is imported first, with every
    cogrpo module forgotten before (third-party modules stay loaded, for speed)."""
    import subprocess
    import sys

    lib = ROOT / "src/cogrpo"
    names = sorted(".".join(p.relative_to(lib).with_suffix("").parts).removesuffix(".__init__")
                   for p in lib.rglob("*.py") if p.name != "__init__.py" or p.parent != lib)
    code = (f"import importlib, sys\nfor n in {names!r}:\n"
            "    for m in [m for m in sys.modules if m.startswith('cogrpo')]:\n        del sys.modules[m]\n"
            "    importlib.import_module('cogrpo.' + n)\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_schema_imports_only_leaf_modules():
    """config (the params schema) sits under everything: it imports only modules that import nothing of the
    library themselves, so no import circle can pass through it."""
    from adapters.code_deps import closure

    assert set(closure(("cogrpo.config",))) == {"src/cogrpo/__init__.py", "src/cogrpo/config.py", "src/cogrpo/errors.py",
                                               "src/cogrpo/world/__init__.py", "src/cogrpo/world/palette.py",
                                               "src/cogrpo/shares.py"}


def test_a_stage_process_imports_no_heavy_library_it_may_not_need():
    """Every DVC stage is a fresh process: transformers (~7 s on 2 cores), sklearn (~1 s) and diffusers load only
    when a stage builds a text encoder, fits the tokenizer or loads aMUSEd/Meissonic — not at import."""
    import subprocess
    import sys

    probe = ("import sys, flows.pipeline, pipelines.stage; "
             "print(' '.join(m for m in ('transformers', 'sklearn', 'diffusers', 'peft') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"imported at start: {out.stdout.strip()}"
