"""The package's layering holds: imports point down, never up, never across siblings, no cycles.

The layers, top to bottom (docs/architecture.md): ``cli`` → ``api`` → ``install`` |
``registry`` → ``bundle`` → ``config`` | ``home`` → ``fs`` → ``rules`` → ``errors``. ``config``
and ``home`` sit side by side and share nothing; a rule both need belongs in ``rules``; so do
``install`` and ``registry`` (``agents import oci://…`` is composed in ``api``, the public API
the CLI calls). Every import counts, the ones inside functions too: a lazy import that runs up
a layer is still a dependency that runs up.

The command line is a client of the API: ``cli`` imports ``bundler.api`` (its package and
modules: the operations, ``api.display`` for showing reports, ``api.process`` for signals),
``bundler.errors`` (the exceptions the API raises, whose exit codes the CLI ends with: the same
classes ``bundler.api`` re-exports), the package root (the version) and its own modules;
nothing else below it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "bundler"

LAYERS = {
    "errors": 0,
    "rules": 1,
    "fs": 2,
    "config": 3,
    "home": 3,
    "bundle": 4,
    "install": 5,
    "registry": 5,
    "api": 6,
    "cli": 7,
}
# the package root (version) and the ``python -m bundler`` entry point sit outside the layers
OUTSIDE = {"bundler", "bundler.__main__"}
# what a cli module may import of the package (besides the package root, for its version)
CLI_MAY_IMPORT = ("bundler.api", "bundler.errors", "bundler.cli")
# the pure layer does no file I/O: these modules may not even be imported there
IO_MODULES = {"shutil", "subprocess", "fcntl", "sqlite3", "socket", "tempfile", "zipfile"}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _imports(path: Path, name: str) -> set[str]:
    """Every bundler module (or package) ``path`` imports, wherever the import statement is."""
    found: set[str] = set()
    known = _modules()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "bundler")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = (
                    name.split(".")[: -node.level]
                    if path.name != "__init__.py"
                    else (name.split(".")[: len(name.split(".")) - node.level + 1])
                )
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            if module.split(".")[0] != "bundler":
                continue
            for alias in node.names:
                # ``from bundler.fs import safefs`` imports the submodule, not just the package
                sub = f"{module}.{alias.name}"
                found.add(sub if sub in known else module)
    return found


def _layer(module: str) -> str | None:
    parts = module.split(".")
    if module in OUTSIDE or len(parts) < 2:
        return None
    return parts[1]


def _graph() -> dict[str, set[str]]:
    return {name: _imports(path, name) for name, path in _modules().items()}


def test_every_module_belongs_to_a_layer() -> None:
    strays = [m for m in _modules() if m not in OUTSIDE and _layer(m) not in LAYERS]
    assert strays == [], f"modules outside the layers (move them into one): {strays}"


def test_no_import_runs_up_a_layer_or_across_siblings() -> None:
    violations = []
    for module, imported in _graph().items():
        here = _layer(module)
        if here is None:
            continue
        for target in imported:
            there = _layer(target)
            if there is None or there == here:
                continue
            if LAYERS[there] > LAYERS[here]:
                violations.append(f"{module} imports {target} (up: {here} → {there})")
            elif LAYERS[there] == LAYERS[here]:
                violations.append(f"{module} imports {target} (across siblings {here} ↔ {there})")
    assert violations == []


def _below_the_api(module: str, imported: set[str]) -> set[str]:
    """What cli ``module`` imports of the package that is neither the API nor allowed."""
    return {
        target
        for target in imported
        if target != "bundler"
        and not any(
            target == allowed or target.startswith(f"{allowed}.") for allowed in CLI_MAY_IMPORT
        )
    }


def test_the_cli_imports_only_the_api_the_errors_and_its_own_modules() -> None:
    violations = {
        module: sorted(_below_the_api(module, imported))
        for module, imported in _graph().items()
        if _layer(module) == "cli"
    }
    assert {module: found for module, found in violations.items() if found} == {}


def test_the_cli_rule_sees_an_import_below_the_api(tmp_path: Path) -> None:
    """A cli module importing the bundle layer, inside a function too, is a violation."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from bundler.api import verify\n"
        "from bundler.errors import UsageError\n"
        "def f():\n    from bundler.bundle.verify import verify_bundle\n    return verify_bundle\n"
    )
    imported = _imports(probe, "bundler.cli.probe")
    assert _below_the_api("bundler.cli.probe", imported) == {"bundler.bundle.verify"}


def test_import_graph_has_no_cycles() -> None:
    graph = _graph()
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if nxt not in graph or nxt in OUTSIDE:
                continue
            if state.get(nxt) == 1:
                cycles.append([*stack[stack.index(nxt) :], nxt] if nxt in stack else [node, nxt])
            elif nxt not in state:
                visit(nxt, [*stack, nxt])
        state[node] = 2

    for start in sorted(graph):
        if start not in state:
            visit(start, [start])
    assert cycles == [], f"import cycles: {cycles}"


@pytest.mark.parametrize("module", sorted(m for m in _modules() if _layer(m) == "rules"))
def test_rules_import_no_io_module(module: str) -> None:
    assert _third_party(_modules()[module]) & IO_MODULES == set()


def _third_party(path: Path) -> set[str]:
    """The top-level names of every module ``path`` imports, wherever the statement is."""
    imported: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            imported.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            imported.add(node.module.split(".")[0])
    return imported


def test_only_the_cli_draws_progress() -> None:
    """Lower layers report through ``rules.progress.Progress``; drawing (rich) is the CLI's."""
    drawing = [
        m for m, path in _modules().items() if _layer(m) != "cli" and "rich" in _third_party(path)
    ]
    assert drawing == []


def test_the_checker_sees_an_upward_import(tmp_path: Path) -> None:
    """The walk really finds imports inside functions (or the tests above would prove nothing)."""
    source = PACKAGE / "rules" / "names.py"
    found = _imports(source, "bundler.rules.names")
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    from bundler.cli.output import Output\n    return Output\n")
    assert "bundler.cli.output" in _imports(probe, "bundler.rules.probe")
    assert all(_layer(m) in ("rules", "errors", None) for m in found)
