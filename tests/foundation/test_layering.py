"""The layering (README, "How it is built"): product code never imports test equipment, by an import
statement or by naming it to a dynamic import; recovery -> ledger -> intake, never back; and
inside the ledger, each module imports only from its own layer or below (ledger/__init__.py).

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


# --- inside the ledger ----------------------------------------------------------------------------
# The ledger's layers, bottom first (ledger/__init__.py says what each is). A module is in the
# layer of its longest listed prefix ("ledger.connectors.crm" is in "ledger.connectors"'s).
LEDGER_LAYERS = [
    (
        "records",
        {
            "ledger.models",
            "ledger.journal",
            "ledger.messages",
            "ledger.storable",
            "ledger.rates",
            "ledger.queueing",
            "ledger.worker",
            "ledger.failpoints",
            "ledger.wording",
            "ledger.notices",
            "ledger.appointments",
            "ledger.extraction",
            "ledger.signed_events",
            "ledger.budget",
        },
    ),
    (
        "destinations",
        {
            "ledger.errors",
            "ledger.reading",
            "ledger.http",
            "ledger.limits",
            "ledger.mailaddress",
            "ledger.smtpwire",
            "ledger.reads",
            "ledger.smtp",
            "ledger.connectors",
            "ledger.kinds",
            "ledger.integrations",
        },
    ),
    ("policies", {"ledger.policies"}),
    ("proposals", {"ledger.proposals"}),
    ("engine", {"ledger.effects", "ledger.execution", "ledger.delivery"}),
    (
        "services",
        {
            "ledger",
            "ledger.services",
            "ledger.receipt",
            "ledger.sweeper",
            "ledger.purge",
            "ledger.tasks",
            "ledger.webhooks",
            "ledger.inbound",
            "ledger.residentpage",
            "ledger.receivers",
            "ledger.admin",
            "ledger.apps",
            "ledger.management",
        },
    ),
]


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def layer_of(module: str, layers=LEDGER_LAYERS) -> int | None:
    best = None
    for index, (_name, prefixes) in enumerate(layers):
        for prefix in prefixes:
            inside = module == prefix or module.startswith(prefix + ".")
            if inside and (best is None or len(prefix) > best[0]):
                best = (len(prefix), index)
    return None if best is None else best[1]


def imported_modules(path: Path, module: str, package: str) -> set[str]:
    """Every module of ``package`` that ``path`` imports, at the top or inside a function: for
    ``from a import b``, ``a.b`` when that is a module, else ``a``."""
    tree = ast.parse(path.read_text())
    root = path.parents[len(module.split(".")) - (0 if path.name == "__init__.py" else 1)]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                if path.name != "__init__.py":
                    base = base[:-1]
                base = base[: len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for alias in node.names:
                candidate = f"{source}.{alias.name}"
                as_path = root.joinpath(*candidate.split("."))
                is_module = (
                    as_path.with_suffix(".py").is_file() or (as_path / "__init__.py").is_file()
                )
                found.add(candidate if is_module else source)
    return {name for name in found if name == package or name.startswith(package + ".")}


def ledger_imports(root: Path = PROJECT_ROOT, package: str = "ledger") -> dict[str, set[str]]:
    graph = {}
    for path in sorted((root / package).rglob("*.py")):
        if "migrations" in path.parts:
            continue
        module = module_name(path, root)
        graph[module] = imported_modules(path, module, package) - {module}
    return graph


def upward_imports(graph: dict[str, set[str]], layers=LEDGER_LAYERS) -> list[str]:
    problems = []
    for module, imports in sorted(graph.items()):
        mine = layer_of(module, layers)
        if mine is None:
            problems.append(f"{module}: in no layer (add it to LEDGER_LAYERS)")
            continue
        for target in sorted(imports):
            theirs = layer_of(target, layers)
            if theirs is not None and theirs > mine:
                problems.append(
                    f"{module} ({layers[mine][0]}) imports {target} ({layers[theirs][0]})"
                )
    return problems


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles (strongly connected components of more than one module). A package
    importing its own modules (``ledger.execution`` re-exporting) is not a circle unless one
    of them imports the package back."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    counter = [0]

    def visit(node):
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, ()):
            if target not in graph:
                continue
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_ledger_imports_only_from_its_own_layer_or_below():
    graph = ledger_imports()
    assert graph, "no ledger module read"
    assert upward_imports(graph) == []


def test_the_ledger_has_no_import_circle():
    graph = ledger_imports()
    assert graph, "no ledger module read"
    assert circles(graph) == []


def test_the_layer_check_sees_an_upward_import_deferred_into_a_function(tmp_path):
    """The check itself, on the shapes the ledger's old circle took (so it cannot pass
    silently): a model importing a kind inside a method, and two modules importing each
    other."""
    package = tmp_path / "ledger"
    (package / "connectors").mkdir(parents=True)
    for name in ("__init__.py", "connectors/__init__.py", "errors.py"):
        (package / name).write_text("")
    (package / "models.py").write_text(
        "def capabilities(row):\n    from ledger.kinds import KINDS\n    return KINDS\n"
    )
    (package / "kinds.py").write_text("from ledger.connectors import base\n")
    (package / "connectors" / "base.py").write_text("def request():\n    from ledger import http\n")
    (package / "http.py").write_text("from ledger.connectors.base import request\n")
    graph = ledger_imports(tmp_path)
    assert graph["ledger.models"] == {"ledger.kinds"}
    assert graph["ledger.connectors.base"] == {"ledger.http"}
    assert upward_imports(graph) == ["ledger.models (records) imports ledger.kinds (destinations)"]
    assert circles(graph) == [["ledger.connectors.base", "ledger.http"]]
