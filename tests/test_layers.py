"""Arrows run down: collectors know only the event; signals derive metrics and spans from
collectors' events; exporters ship the events and the signals' state; the application (spyglass/)
and the observed stack (engine/) sit above them, and engine/ needs no exporter."""

from __future__ import annotations

import ast
import graphlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# The layers of the one installed package: spyglass.<layer> for these, the application (spyglass) for the rest.
LAYERS = {"collectors": "collectors", "signals": "spyglass/signals", "exporters": "exporters", "engine": "engine"}
FORBIDDEN = {
    "collectors": {"signals", "exporters", "spyglass", "engine"},
    "signals": {"exporters", "spyglass", "engine"},
    "exporters": {"spyglass", "engine"},
    "engine": {"spyglass", "exporters"},
}


def layer(module: str) -> str:
    """The layer a dotted module name belongs to: `spyglass.collectors.tailer` -> collectors."""
    parts = module.split(".")
    if parts[0] != "spyglass":
        return parts[0]
    return parts[1] if len(parts) > 1 and parts[1] in LAYERS else "spyglass"


def imported_packages(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {layer(alias.name) for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names |= {layer(f"{node.module}.{alias.name}") for alias in node.names}
    return names


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_a_package_imports_nothing_above_it(package):
    offenders = {
        str(path.relative_to(ROOT)): sorted(imported_packages(path) & FORBIDDEN[package])
        for path in sorted((ROOT / LAYERS[package]).rglob("*.py"))
    }
    assert {path: bad for path, bad in offenders.items() if bad} == {}


def test_the_rule_sees_a_violation(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text(
        "from spyglass.config import Config\nimport spyglass.engine.instrument\nfrom spyglass import signals\n"
    )
    assert imported_packages(bad) >= {"spyglass", "engine", "signals"}


def test_the_wheel_layers_are_linked_into_the_one_package():
    for name, folder in LAYERS.items():
        linked = ROOT / "spyglass" / name
        assert linked.is_dir() and linked.resolve() == (ROOT / folder).resolve(), name


def python_files(folder: Path) -> list[Path]:
    """The .py files under folder, through the links that put the layers inside spyglass/."""
    return sorted(
        Path(top, name) for top, _, names in os.walk(folder, followlinks=True) for name in names if name.endswith(".py")
    )


def module_graph(root: Path, packages: list[str]) -> dict[str, set[str]]:
    """Module -> the modules of `packages` it imports anywhere (also inside a function, where the cycle
    hides until the call), each import resolved to the deepest module that exists; a module's own
    packages are left out (a package's __init__ runs before its modules either way)."""
    files = {
        ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__"): path
        for package in packages
        for path in python_files(root / package)
    }

    def resolve(name: str) -> str | None:
        while name and name not in files:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        names: list[str] = []
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names += [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names += [f"{node.module}.{alias.name}" for alias in node.names]
        found = {resolve(name) for name in names} - {None, module}
        graph[module] = {name for name in found if name and not module.startswith(name + ".")}
    return graph


def import_cycle(graph: dict[str, set[str]]) -> list[str]:
    """One cycle of the graph, or [] if it has none."""
    try:
        tuple(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as exc:
        return list(exc.args[1])
    return []


def test_no_module_imports_itself_round_a_cycle():
    assert import_cycle(module_graph(ROOT, ["spyglass"])) == []


def test_the_cycle_rule_sees_a_cycle_through_a_function_level_import(tmp_path):
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "__init__.py").write_text("")
    (tmp_path / "app" / "a.py").write_text("from app.b import f\n")
    (tmp_path / "app" / "b.py").write_text("def f():\n    from app.a import g\n")
    assert set(import_cycle(module_graph(tmp_path, ["app"]))) == {"app.a", "app.b"}


def test_loading_the_sources_imports_no_pyarrow_and_skips_no_registration(spawns):
    """load_all() leaves out the ON_DEMAND modules; they must register nothing, or a source would vanish."""
    code = (
        "import sys, importlib\nfrom spyglass import collectors\n"
        "before = dict(collectors.load_all())\n"
        "assert 'pyarrow' not in sys.modules, 'load_all imported pyarrow'\n"
        "for name in collectors.ON_DEMAND: importlib.import_module('spyglass.collectors.' + name)\n"
        "assert collectors.REGISTRY == before, 'an ON_DEMAND module registered a source'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr


def misnamed_signals(registrations, source_kinds: set[str], modules: set[str]) -> list[str]:
    """What breaks the rule that a signals module is named for the registered source kind it serves: a class
    registered for a kind no source registers, or living in a module of another name, and a module named like
    a source kind that does not serve it."""
    out = []
    for kind, registration in registrations.items():
        if registration.cls is None:  # declare_only: rows with no event-driven class (the agent's own health)
            continue
        if kind not in source_kinds:
            out.append(f"{kind}: no source kind of that name is registered")
        if registration.cls.__module__ != f"spyglass.signals.{kind}":
            out.append(f"{kind}: served from {registration.cls.__module__}, not spyglass.signals.{kind}")
    served = {kind for kind, registration in registrations.items() if registration.cls is not None}
    return out + [
        f"spyglass.signals.{name}: named for {name} but does not serve it"
        for name in sorted(modules & source_kinds - served)
    ]


def test_each_signals_module_is_named_for_the_source_kind_it_serves():
    from spyglass import collectors, signals

    modules = {path.stem for path in (ROOT / "spyglass" / "signals").glob("*.py")}
    assert misnamed_signals(signals.load_all(), set(collectors.load_all()), modules) == []


def test_the_naming_rule_sees_a_misnamed_module():
    from spyglass.signals import SignalsRegistration

    class Gateway:  # a class serving gateway_log from spyglass.signals.gateway (the name before the rule)
        __module__ = "spyglass.signals.gateway"

    found = misnamed_signals(
        {
            "gateway_log": SignalsRegistration("gateway_log", Gateway, ()),
            "llama": SignalsRegistration("llama", Gateway, ()),
        },
        {"gateway_log", "host"},
        {"host"},
    )
    assert found == [
        "gateway_log: served from spyglass.signals.gateway, not spyglass.signals.gateway_log",
        "llama: no source kind of that name is registered",
        "llama: served from spyglass.signals.gateway, not spyglass.signals.llama",
        "spyglass.signals.host: named for host but does not serve it",
    ]
