"""The package shape (docs/architecture.md): layers that import only downwards, small modules, short functions.

Layers, lowest first: errors, inputs, cost, search, strategies, report, evidence; cli sits on top. A module may import
its own layer or a lower one, never a higher one, and the planner never imports the CLI. A module over 400 lines or a
function over 80 lines must say why (a comment containing "long because" beside the def, or "size:" in a module's
docstring).
"""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ("errors", "inputs", "cost", "search", "strategies", "report", "evidence")
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 80


def _modules() -> list[Path]:
    return sorted(p for d in ("planner", "cli") for p in (ROOT / d).rglob("*.py"))


def _layer(module: str) -> int:
    parts = module.split(".")
    if parts[0] == "cli":
        return len(LAYERS)
    if len(parts) < 2 or parts[1] in ("__init__",):
        return -1  # planner/__init__.py: the version only
    return LAYERS.index(parts[1])


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append(node.module)
        elif isinstance(node, ast.Import):
            found.extend(alias.name for alias in node.names)
    return [m for m in found if m.split(".")[0] in ("planner", "cli")]


def _name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts)


@pytest.mark.parametrize("path", _modules(), ids=_name)
def test_imports_point_down_the_flow(path: Path) -> None:
    me = _layer(_name(path))
    for target in _imports(path):
        if target == "planner":
            continue  # `from planner import __version__`
        assert _layer(target) <= me, f"{_name(path)} imports {target}, a higher layer"


def test_no_relative_imports() -> None:
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                assert node.level == 0, f"{_name(path)}: relative import"


@pytest.mark.parametrize("path", _modules(), ids=_name)
def test_module_and_function_sizes(path: Path) -> None:
    text = path.read_text()
    tree = ast.parse(text)
    lines = text.splitlines()
    doc = ast.get_docstring(tree) or ""
    assert len(lines) <= MAX_MODULE_LINES or "size:" in doc, f"{_name(path)}: {len(lines)} lines and no reason"
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            length = node.end_lineno - node.lineno + 1
            if length > MAX_FUNCTION_LINES:
                first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                beside = " ".join(lines[max(first - 3, 0):node.lineno])
                assert "long because" in beside, f"{_name(path)}:{node.lineno} {node.name} has {length} lines"


def test_layout_section_names_every_module_and_nothing_else() -> None:
    """docs/architecture.md's "Layout of the repository" names every module and folder of planner/ and cli/."""
    import re

    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text[text.index("<!-- layout:begin -->"):text.index("<!-- layout:end -->")]
    named = (set(re.findall(r"`([a-z_]+)`", section)) | set(re.findall(r"`(?:[a-z_]+/)*([a-z_]+)/`", section))
             | set(re.findall(r"`(?:[a-z_]+/)*([a-z_]+)\.py`", section)))
    folders = {p.name for d in ("planner", "cli") for p in (ROOT / d).rglob("*")
               if p.is_dir() and p.name != "__pycache__"}
    tree = {p.stem for p in _modules() if p.stem != "__init__"} | folders | {"cli"}
    named = {n.rstrip("/") for n in named}
    assert tree - named == set(), f"modules missing from docs/architecture.md's layout: {sorted(tree - named)}"
    assert named - tree == set(), f"docs/architecture.md names modules that do not exist: {sorted(named - tree)}"
