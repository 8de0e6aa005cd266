"""The import contract (docs/ARCHITECTURE.md): which project package may import which.

Every import statement of every module is read with `ast` (module level, inside functions and
under `if TYPE_CHECKING:` alike: a deferred import is still a dependency), so the rule holds
whether or not a code path runs. Third-party and standard-library imports are not restricted.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# package -> the project packages it may import (itself included). `kvsched` is the application
# (the composition root) and `benchmarks` are applications too: they may import everything, but
# nothing imports them.
ALLOWED: dict[str, set[str]] = {
    "sim": {"sim"},
    "policies": {"sim", "policies"},
    "workloads": {"sim", "workloads"},
    "reports": {"sim", "reports"},
    "kernels": {"kernels"},
    "engine": {"sim", "kernels", "engine"},
}
APPLICATIONS = {"kvsched", "benchmarks"}
# Known breaches, each with the change that removes it; a fixed one must leave this list (a test
# says so), and nothing may be added without such a note.
KNOWN_VIOLATIONS: set[tuple[str, str]] = set()  # none today
PACKAGES = set(ALLOWED) | APPLICATIONS
for _app in APPLICATIONS:
    ALLOWED[_app] = PACKAGES


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """(line, absolute dotted name) of every import in the file; relative ones are resolved."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    here = path.relative_to(ROOT).with_suffix("").parts
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # `from . import x` inside package/module.py: relative to package/
                base = here[: len(here) - node.level]
                name = ".".join(base + ((node.module,) if node.module else ()))
            else:
                name = node.module or ""
            found.append((node.lineno, name))
    return found


def package_modules(package: str) -> list[Path]:
    """The package's modules: .py files whose folders all have an __init__.py, from the package
    down (a script in a data folder such as engine/runs/ is not part of the package)."""
    top = ROOT / package

    def in_package(path: Path) -> bool:
        folders = path.parent.relative_to(top).parts
        return all(
            (top.joinpath(*folders[:i]) / "__init__.py").is_file() for i in range(len(folders) + 1)
        )

    return [path for path in sorted(top.rglob("*.py")) if in_package(path)]


def package_imports() -> dict[str, list[tuple[str, int, str]]]:
    """package -> [(file, line, imported project package)] for imports of other packages."""
    edges: dict[str, list[tuple[str, int, str]]] = {p: [] for p in PACKAGES}
    for package in sorted(PACKAGES):
        for path in package_modules(package):
            for line, name in imported_modules(path):
                target = name.split(".")[0]
                if target in PACKAGES and target != package:
                    edges[package].append((str(path.relative_to(ROOT)), line, target))
    return edges


def violations() -> list[tuple[str, int, str, str]]:
    """(file, line, package, imported package) of every import its layer does not allow."""
    return [
        (file, line, package, target)
        for package, found in package_imports().items()
        for file, line, target in found
        if target not in ALLOWED[package]
    ]


def test_every_package_imports_only_what_its_layer_allows():
    new = [
        f"{file}:{line} imports {target} ({package}/ may import only "
        f"{', '.join(sorted(ALLOWED[package]))})"
        for file, line, package, target in violations()
        if (file, target) not in KNOWN_VIOLATIONS
    ]
    assert not new, "import contract broken:\n" + "\n".join(new)


def test_known_violations_still_exist():
    found = {(file, target) for file, _, _, target in violations()}
    fixed = sorted(KNOWN_VIOLATIONS - found)
    assert not fixed, f"fixed, remove from KNOWN_VIOLATIONS: {fixed}"


def test_nothing_imports_an_application():
    users = [
        f"{file}:{line} imports {target}"
        for package, found in package_imports().items()
        if package not in APPLICATIONS
        for file, line, target in found
        if target in APPLICATIONS
    ]
    assert not users, "\n".join(users)


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle of the directed graph as [a, b, ..., a], or None if it is a DAG (depth-first)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_package_graph_has_no_cycle():
    graph = {p: {target for _, _, target in found} for p, found in package_imports().items()}
    cycle = find_cycle(graph)
    assert cycle is None, "package cycle: " + " -> ".join(cycle or [])


def test_find_cycle_sees_a_cycle_and_a_dag():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_relative_and_function_level_imports_are_read(tmp_path, monkeypatch):
    pkg = tmp_path / "sim" / "kv"
    pkg.mkdir(parents=True)
    module = pkg / "x.py"
    module.write_text("from . import y\nfrom ..z import w\ndef f():\n    import policies.lru\n")
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path)
    names = [name for _, name in imported_modules(module)]
    assert names == ["sim.kv", "sim.z", "policies.lru"]


def test_an_upward_import_is_reported(tmp_path, monkeypatch):
    for package in PACKAGES:
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "sim" / "node.py").write_text("def f():\n    from policies import lru\n")
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path)
    assert violations() == [("sim/node.py", 2, "sim", "policies")]
