"""The package's layering, as a test: README's layer list, no import cycles, no reaching in.

Each module may import only from its own layer and the layers above it in
README's "Layout" list; the helpers (errors, names, schema, constraints,
properties) are usable everywhere. Imports under ``if TYPE_CHECKING:`` are
annotations, not dependencies. The one documented exception: a
transaction's table handle reaches the ``ops`` verbs through lazy imports.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import mere

PACKAGE = Path(mere.__file__).parent

#: README's Layout list, top to bottom: a layer depends only on layers before it.
LAYERS = [
    "storage",
    "log",
    "data",
    "expr",
    "snapshot",
    "txn",
    "ops",
    "maintain",
    "database",
    "sql",
    "spark",
    "verify",
    "cli",
]
HELPERS = {
    "errors",
    "names",
    "schema",
    "constraints",
    "properties",
    "timestamps",
    "__init__",
    "__main__",
}
#: (importing layer, imported layer) pairs allowed as lazy, function-level imports only:
#: a transaction's table handle reaches the ``ops`` verbs, and ``db.sql``, ``snapshot.sql``
#: and ``tx.sql`` reach the ``sql`` layer.
LAZY_EXCEPTIONS = {("txn", "ops"), ("snapshot", "sql"), ("txn", "sql"), ("database", "sql")}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer_of(module: str) -> str:
    """The layer (or helper) a ``mere.*`` module belongs to."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def imports(path: Path) -> list[tuple[str, bool]]:
    """(imported mere module, at module level?) for each import outside TYPE_CHECKING."""
    tree = ast.parse(path.read_text(), str(path))
    found: list[tuple[str, bool]] = []
    package = (
        module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    )

    def visit(node: ast.AST, top: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                for stmt in child.orelse:
                    visit(stmt, top)
                continue
            if isinstance(child, ast.Import):
                found.extend((a.name, top) for a in child.names if a.name.startswith("mere"))
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    base = ".".join(
                        package.split(".")[: len(package.split(".")) - child.level + 1]
                        + ([base] if base else [])
                    )
                if base.startswith("mere"):
                    for alias in child.names:
                        candidate = f"{base}.{alias.name}"
                        sub = PACKAGE.parent / Path(*candidate.split("."))
                        is_module = (
                            sub.with_suffix(".py").exists() or (sub / "__init__.py").exists()
                        )
                        found.append((candidate if is_module else base, top))
            nested = isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
            visit(child, top and not nested)

    visit(tree, True)
    return found


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in PACKAGE.rglob("*.py")}


def test_every_layer_is_listed() -> None:
    layers = {layer_of(m) for m in modules()}
    assert layers <= set(LAYERS) | HELPERS, layers - set(LAYERS) - HELPERS


def test_no_module_imports_from_a_layer_below_it() -> None:
    rank = {layer: i for i, layer in enumerate(LAYERS)}
    wrong = []
    for name, path in sorted(modules().items()):
        mine = layer_of(name)
        if mine in HELPERS or name.endswith(".__main__"):  # entry points may reach anything
            continue
        for target, top in imports(path):
            theirs = layer_of(target)
            if theirs in HELPERS or theirs == mine:
                continue
            if rank[theirs] > rank[mine] and not (not top and (mine, theirs) in LAZY_EXCEPTIONS):
                wrong.append(f"{name} imports {target} ({mine} -> {theirs})")
    assert wrong == []


def test_no_import_cycles_at_module_level() -> None:
    graph = {
        name: {t for t, top in imports(path) if top and t != name}
        for name, path in modules().items()
    }
    graph = {k: {t for t in v if t in graph} for k, v in graph.items()}
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def walk(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            # A package's __init__ importing its own submodules is how packages work.
            if nxt.startswith(node + "."):
                continue
            if state.get(nxt) == 1:
                cycles.append([*stack[stack.index(nxt) :], nxt] if nxt in stack else [node, nxt])
            elif nxt not in state:
                walk(nxt, [*stack, nxt])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            walk(name, [name])
    assert cycles == []


PRIVATE = re.compile(r"\b(?:tx|_tx|transaction|txn)\._[a-z]\w*")


def test_nothing_outside_txn_reaches_into_a_transaction() -> None:
    wrong = []
    for name, path in sorted(modules().items()):
        if name.startswith("mere.txn"):
            continue
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            if PRIVATE.search(line) or re.search(r"\bdb\._(?!_)\w+", line):
                wrong.append(f"{name}:{number}: {line.strip()}")
    assert wrong == []
