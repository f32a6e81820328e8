"""Fail when a production function is longer than a screen (docs/architecture.md, "Layers").

Usage: python tests/lint/long_functions.py [MAX_LINES] — checks jobs/ and bridge/ (migrations excepted) and lists
every function or method over MAX_LINES lines (default 60), counted from its `def` line to its last line.
"""

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("jobs", "bridge")


def long_functions(max_lines: int) -> list[str]:
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "migrations" in path.parts:
                continue
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    length = node.end_lineno - node.lineno + 1
                    if length > max_lines:
                        found.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} is {length} lines")
    return found


if __name__ == "__main__":
    limit = int(sys.argv[1]) if len(sys.argv) > 1 else 60
    problems = long_functions(limit)
    for problem in problems:
        print(problem)
    if problems:
        print(f"{len(problems)} function(s) over {limit} lines: split them by phase (docs/architecture.md)")
        sys.exit(1)
    print(f"no function over {limit} lines")
