"""The layering (README, "How it is built"): product code never imports test equipment, by an import
statement or by naming it to a dynamic import; and recovery -> ledger -> intake, never back.

Read from the source (AST), so an import inside a function counts as much as one at the top.
"""

import ast
from pathlib import Path

import pytest

PROJECT_ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("intake", "ledger", "recovery", "config")
EQUIPMENT = {"sandbox", "harness"}
# What a package may not import: the layers above it (and, for all of them, the equipment).
FORBIDDEN = {
    "intake": EQUIPMENT | {"ledger", "recovery"},
    "ledger": EQUIPMENT | {"recovery"},
    "recovery": EQUIPMENT,
    "config": EQUIPMENT,
}
DYNAMIC_IMPORTS = {"import_module", "__import__", "import_string", "find_spec", "resolve_name"}


def product_modules(root: Path = PROJECT_ROOT):
    for package in PRODUCT:
        for path in sorted((root / package).rglob("*.py")):
            if "migrations" not in path.parts:
                yield package, path


def names_a_module_of(text: str, packages: set[str], root: Path) -> bool:
    """Is ``text`` a dotted path into a module of one of ``packages`` ("harness.drill",
    "harness.drill.runner.Drill")? A file name such as "sandbox.sqlite3" or a journal action
    such as "recovery.operation.cancelled" is not: its first two parts must be a module there."""
    parts = text.split(".")
    if len(parts) < 2 or parts[0] not in packages:
        return False
    if not all(part.isidentifier() for part in parts):
        return False
    base = root / parts[0] / parts[1]
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def _called_name(node: ast.Call) -> str | None:
    if isinstance(node.func, ast.Name):
        return node.func.id
    if isinstance(node.func, ast.Attribute):
        return node.func.attr
    return None


def violations(path: Path, forbidden: set[str], root: Path = PROJECT_ROOT) -> list[str]:
    tree = ast.parse(path.read_text())
    found = []
    calls = [node for node in ast.walk(tree) if isinstance(node, ast.Call)]
    dynamic = [call for call in calls if _called_name(call) in DYNAMIC_IMPORTS]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        found += [f"line {node.lineno}: import {n}" for n in names if n.split(".")[0] in forbidden]
    # A module that imports by name: any string naming a forbidden package is the name it uses
    # (passed straight, or kept in a constant first, as ``EQUIPMENT = "harness.drill"`` was).
    # The bare app labels in config/settings.py's INSTALLED_APPS ("sandbox", "harness") are
    # Django's to load (they register `manage.py runsandbox` and `drill`), not a product import.
    for call in dynamic:
        first = call.args[0] if call.args else None
        if isinstance(first, ast.Constant) and str(first.value).split(".")[0] in forbidden:
            found.append(f"line {call.lineno}: {_called_name(call)}({first.value!r})")
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
            if names_a_module_of(text, forbidden, root) or (dynamic and text in forbidden):
                found.append(f"line {node.lineno}: names {text!r}")
    return sorted(set(found))


@pytest.mark.parametrize("package", PRODUCT)
def test_product_code_imports_no_test_equipment_and_no_layer_above_it(package):
    problems = {
        str(path.relative_to(PROJECT_ROOT)): found
        for owner, path in product_modules()
        if owner == package and (found := violations(path, FORBIDDEN[package]))
    }
    assert problems == {}


def test_the_check_sees_imports_by_name_as_well_as_import_statements(tmp_path):
    """The check itself, on the shapes a violation takes (so a silent check cannot pass)."""
    (tmp_path / "harness" / "drill").mkdir(parents=True)
    (tmp_path / "harness" / "__init__.py").write_text("")
    (tmp_path / "harness" / "drill" / "__init__.py").write_text("")
    shapes = {
        "static.py": "from harness.drill import runner\n",
        "lazy.py": "def f():\n    import harness\n",
        "constant.py": 'import importlib\nNAME = "harness.drill"\nimportlib.import_module(NAME)\n',
        "direct.py": 'from importlib import import_module\nimport_module("harness")\n',
        "string.py": 'CLASS = "harness.drill.runner.Drill"\n',
        "dunder.py": '__import__("harness.drill")\n',
    }
    for name, source in shapes.items():
        (tmp_path / name).write_text(source)
        assert violations(tmp_path / name, EQUIPMENT, root=tmp_path), name
    # Not a module path, and no dynamic import: a label and a file name are fine.
    (tmp_path / "fine.py").write_text('LABEL = "sandbox"\nDATA = "sandbox.sqlite3"\n')
    assert violations(tmp_path / "fine.py", EQUIPMENT, root=tmp_path) == []
