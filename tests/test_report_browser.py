"""`plan report` opened in a real headless browser (Chromium), as a person would look at it: every chart drew with a
non-empty box, no script error was logged, and a screenshot has the charts' colours in it. Skips without Chromium
(CI installs Debian's `chromium`; see .ci/run)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from conftest import run_plan_in_process

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from report_screenshot import chromium, dump_dom, screenshot  # noqa: E402

pytestmark = pytest.mark.skipif(chromium() is None, reason="needs chromium (apt-get install chromium)")

PIPELINED = ("--model", "llama70b", "--cluster", "a100x128", "--global-batch", "512", "--framework", "megatron")


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("browser") / "report.html"
    r = run_plan_in_process("report", *PIPELINED, "-o", str(out))
    assert r.returncode == 0, r.stderr
    return out


def test_every_chart_renders_without_script_errors(page: Path) -> None:
    dom, log = dump_dom(page)
    expected = re.search(r'data-charts-expected="(\d+)"', dom)
    rendered = re.search(r'data-charts-rendered="(\d+)"', dom)
    assert expected and int(expected.group(1)) == 4  # scatter, breakdown, memory, timeline
    assert rendered, "the page's check script did not run"
    assert rendered.group(1) == expected.group(1)
    assert console_lines(log) == []  # the page logs nothing; any console line is an error or a warning


def console_lines(log: str) -> list[str]:
    return [line for line in log.splitlines() if ":CONSOLE" in line]


def test_the_console_check_sees_a_script_error(tmp_path: Path) -> None:
    """The check above could fail: a page with a broken script is caught."""
    bad = tmp_path / "bad.html"
    bad.write_text("<html><body><script>notDefined();</script></body></html>")
    _, log = dump_dom(bad)
    assert any("Uncaught ReferenceError" in line for line in console_lines(log))


def test_screenshot_shows_the_charts(page: Path, tmp_path: Path) -> None:
    from PIL import Image

    png = screenshot(page, tmp_path / "report.png", width=1280, height=5000)
    with Image.open(png) as im:
        rgb = im.convert("RGB")
        assert rgb.width == 1280 and rgb.height > 2000  # trimmed to the content, which is long
        colours = {c for _, c in rgb.getcolors(maxcolors=1 << 20) or []}
    # The charts' palette is on screen: the forward/weights blue, the backward orange and the Pareto/star red.
    def near(target: tuple[int, int, int]) -> bool:
        return any(sum(abs(a - b) for a, b in zip(c, target, strict=True)) < 12 for c in colours)

    assert near((0x4C, 0x72, 0xB0)) and near((0xDD, 0x84, 0x52)) and near((0xE3, 0x24, 0x2B))
