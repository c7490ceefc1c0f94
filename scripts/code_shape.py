"""The shape of the code: module and function sizes, for issue-level before/after comparisons.

    .venv/bin/python scripts/code_shape.py [ROOT]

Counts non-blank lines of every first-party .py file (tests apart) and of every function body,
and prints the distribution: count, median, 90th percentile, max, and how many exceed 50 lines.
"""

from __future__ import annotations

import ast
import statistics
import sys
from pathlib import Path

PACKAGES = ("collectors", "exporters", "engine", "spyglass", "dashboards", "alerts", "bench", "scripts")


def code_lines(text: str) -> int:
    return sum(1 for line in text.splitlines() if line.strip())


def function_sizes(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), str(path))
    lines = path.read_text().splitlines()
    return [
        (code_lines("\n".join(lines[node.lineno - 1 : node.end_lineno])), f"{path}:{node.lineno} {node.name}")
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    ]


def summary(name: str, sizes: list[int]) -> str:
    ordered = sorted(sizes)
    p90 = ordered[int(0.9 * (len(ordered) - 1))]
    return (
        f"{name}: {len(ordered)}, median {statistics.median(ordered):g}, p90 {p90}, max {ordered[-1]},"
        f" over 50: {sum(size > 50 for size in ordered)}"
    )


def main(root: Path) -> None:
    files = [
        path for package in PACKAGES for path in sorted((root / package).rglob("*.py")) if ".venv" not in path.parts
    ]
    modules = [code_lines(path.read_text()) for path in files]
    functions = [item for path in files for item in function_sizes(path)]
    print(summary("modules (non-blank lines)", modules), f"total {sum(modules)}")
    print(summary("functions (non-blank lines)", [size for size, _ in functions]))
    for size, where in sorted(functions, reverse=True)[:5]:
        print(f"  {size:4d}  {Path(where).relative_to(root) if where.startswith(str(root)) else where}")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve())
