"""Arrows run down. One table, ORDER, says which room of the one installed package may import which: a room
may import the rooms it names and, through them, what those may import. Every .py of every room is read
(the rooms at the checkout's root, dashboards included), and every import counts: at module level or inside a
function, `import x` or `from x import y`, `from spyglass import forensics` as much as `import
spyglass.forensics`. CONTRIBUTING.md shows the table (`pytest tests/test_layers.py --update-golden` writes it
there). No exception list: a room that needs something of a room above it moves that below both."""

from __future__ import annotations

import ast
import functools
import graphlib
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "spyglass"
# Room -> the rooms it may import (and, through them, theirs), lowest first. A room is a subpackage of spyglass
# (the rooms at the checkout's root are linked into it), a module of spyglass/ itself, `spyglass` for its
# __init__ (the version), or a library only some rooms may use. Each with why it sits where it does.
ORDER: dict[str, tuple[tuple[str, ...], str]] = {
    "spyglass": ((), "the package's `__init__`: its version"),
    "resources": ((), "the data files the installed package reads, through importlib.resources"),
    "ports": ((), "free loopback ports for the servers the backtest, the demo and the tests start"),
    "serving": ((), "where the agent listens and which commands it answers: the light client reads it too"),
    "collectors": ((), "the sources: options, pure parsers, polls; they know only the event"),
    "signals": (("collectors",), "metrics and spans derived from collectors' events"),
    "exporters": (("signals",), "what leaves the agent: exposition, OTLP, the store, Parquet"),
    "engine": (("signals",), "the observed stack (instrumentation, emulator, llama-server), which needs no exporter"),
    "terminal": (("collectors",), "what every command prints through: the console, tables, times a person types"),
    "query": (("terminal",), "a bounded read-only query in a process of its own"),
    "config": (("query", "serving", "signals"), "the config's models (with the query limits), the signals it makes"),
    "alerting": (("config", "exporters", "ports", "resources"), "heuristics, rules, runbooks, backfill, backtest"),
    "dashboards": (("alerting",), "Grafana dashboards as code, their thresholds read from the heuristics"),
    "forensics": (("alerting",), "what the analyst's commands ask of the store: views, timeline, changes, diagnose"),
    "upgrades": (("forensics",), "the smoke gate and crashes, over forensics' query session"),
    "agent": (("spyglass", "upgrades"), "the running agent: pipeline, store, HTTP API, the evidence pages"),
    "docs": (("forensics",), "the reference docs, generated from the tables"),
    "typer": ((), "the command-line library"),
    "cli": (("agent", "dashboards", "engine", "typer"), "the commands, one `<room>_commands.py` a room, and the demo"),
}
LIBRARIES = {"typer"}  # rooms outside spyglass: imports of them count too


def allowed(room: str) -> set[str]:
    """What `room` may import: itself, what it names, and what those may import."""
    out, todo = {room}, [room]
    while todo:
        for below in ORDER[todo.pop()][0]:
            if below not in out:
                out.add(below)
                todo.append(below)
    return out


def room_of(module: str) -> str | None:
    """The room a dotted name lies in (`spyglass.forensics.run.Query` -> forensics), None for one outside."""
    parts = module.split(".")
    if parts[0] != "spyglass":
        return parts[0] if parts[0] in LIBRARIES else None
    if len(parts) > 1 and ((PACKAGE / parts[1]).is_dir() or (PACKAGE / f"{parts[1]}.py").is_file()):
        return parts[1]
    return "spyglass"  # `from spyglass import __version__`


def python_files(folder: Path) -> list[Path]:
    """The .py files under folder, through the links that put the rooms at the root inside spyglass/."""
    return sorted(
        Path(top, name) for top, _, names in os.walk(folder, followlinks=True) for name in names if name.endswith(".py")
    )


@functools.cache
def rooms() -> dict[str, dict[Path, str]]:
    """Every room of the package: its .py files, each with its dotted name (collectors/x.py: spyglass.collectors.x)."""
    found = {"spyglass": {PACKAGE / "__init__.py": "spyglass"}}
    for entry in sorted(PACKAGE.iterdir()):
        if entry.suffix == ".py" and entry.name != "__init__.py":
            found[entry.stem] = {entry: f"spyglass.{entry.stem}"}
        elif entry.is_dir() and python_files(entry):
            found[entry.name] = {
                path: ".".join(("spyglass", *path.relative_to(PACKAGE).with_suffix("").parts)).removesuffix(".__init__")
                for path in python_files(entry)
            }
    return found


def imports(path: Path, module: str) -> Iterator[tuple[int, str]]:
    """(line, dotted name) of every import in the file of `module`, a function's own and a relative one too."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            package = module if path.name == "__init__.py" else module.rpartition(".")[0]
            base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1]) if node.level else ""
            start = ".".join(part for part in (base, node.module or "") if part)
            yield from ((node.lineno, f"{start}.{alias.name}") for alias in node.names)


def forbidden(path: Path, room: str, module: str) -> list[str]:
    """`file:line: room -> other (name)` for every import of `path` (the file of `module`) that the order does not
    allow `room`."""
    may = allowed(room)
    real = path.resolve()
    shown = real.relative_to(ROOT) if real.is_relative_to(ROOT) else path
    return [
        f"{shown}:{line}: {room} -> {other} ({name})"
        for line, name in imports(path, module)
        if (other := room_of(name)) is not None and other not in may
    ]


def test_the_order_has_no_cycle():
    graph = {room: set(below) for room, (below, _) in ORDER.items()}
    assert all(below in ORDER for names in graph.values() for below in names)
    graphlib.TopologicalSorter(graph).prepare()  # CycleError names the cycle


def test_every_room_of_the_package_is_in_the_order():
    assert set(rooms()) == set(ORDER) - LIBRARIES


@pytest.mark.parametrize("room", sorted(set(ORDER) - LIBRARIES))
def test_a_room_imports_only_what_the_order_allows(room):
    found = rooms()[room]
    assert found
    assert [bad for path, module in found.items() for bad in forbidden(path, room, module)] == []


def test_the_rule_sees_a_violation(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text(
        "from spyglass.config import Config\nimport spyglass.engine.instrument\n"
        "def f():\n    from spyglass import forensics, __version__\n    import typer\n"
        "from spyglass.signals.state import MetricState\nfrom . import sibling\n"
    )
    assert forbidden(bad, "exporters", "spyglass.exporters.bad") == [
        f"{bad}:1: exporters -> config (spyglass.config.Config)",
        f"{bad}:2: exporters -> engine (spyglass.engine.instrument)",
        f"{bad}:4: exporters -> forensics (spyglass.forensics)",
        f"{bad}:4: exporters -> spyglass (spyglass.__version__)",
        f"{bad}:5: exporters -> typer (typer)",
    ]
    assert forbidden(bad, "cli", "spyglass.cli.bad") == []


def test_the_rooms_at_the_root_are_linked_into_the_one_package():
    for name in ("collectors", "exporters", "engine", "dashboards", "alerts", "examples"):
        linked = PACKAGE / name
        assert linked.is_symlink() and linked.resolve() == (ROOT / name).resolve(), name


ORDER_BLOCK = re.compile(r"(<!-- order -->\n).*?(<!-- /order -->)", re.DOTALL)


def where(room: str) -> str:
    """Where a room's files are: `collectors/` (at the root, linked in), `spyglass/agent/`, `spyglass/ports.py`."""
    if room in LIBRARIES:
        return room
    if room == "spyglass":
        return "spyglass/__init__.py"
    if (PACKAGE / room).is_symlink():
        return f"{room}/"
    return f"spyglass/{room}/" if (PACKAGE / room).is_dir() else f"spyglass/{room}.py"


def order_markdown() -> str:
    """The order as CONTRIBUTING.md shows it: the rooms lowest first, each with what it may import."""
    graph = {room: set(below) for room, (below, _) in ORDER.items()}
    lines = ["| room | where | imports (and what those import) | what it holds |", "|---|---|---|---|"]
    for room in graphlib.TopologicalSorter(graph).static_order():
        below, what = ORDER[room]
        imports = ", ".join(f"`{b}`" for b in sorted(below)) or "nothing of the package"
        lines.append(f"| `{room}` | `{where(room)}` | {imports} | {what} |")
    return "\n".join(lines) + "\n"


def test_contributing_shows_the_order(update_golden):
    path = ROOT / "CONTRIBUTING.md"
    text = path.read_text()
    assert ORDER_BLOCK.search(text), "CONTRIBUTING.md lost its <!-- order --> block"
    current = ORDER_BLOCK.sub(lambda m: m[1] + order_markdown() + m[2], text)
    if update_golden:
        path.write_text(text := current)
    assert text == current, "regenerate with `pytest tests/test_layers.py --update-golden`"


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
