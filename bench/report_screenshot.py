"""Open a `plan report` page in headless Chromium as a reader would: the DOM after scripts ran, the console, a
screenshot. tests/test_report_browser.py uses these helpers; run as a script it re-renders docs/report.png:

    python bench/report_screenshot.py            # llama3-405b on h100x2048, megatron-core, 1024 x 8192 tokens

Needs Debian's `chromium` (apt-get install chromium); Pillow (a matplotlib dependency) trims the white below the page.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README_EXAMPLE = ("--model", "llama405b", "--cluster", "h100x2048", "--global-batch", "1024",
                  "--framework", "megatron-core")
# No sandbox: CI containers run as root, where Chromium's sandbox refuses to start; the page is our own file.
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
         "--disable-extensions", "--disable-dev-shm-usage")


def chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        found = shutil.which(name)
        if found:
            return found
    return None


def _run(args: list[str], timeout: float = 120) -> subprocess.CompletedProcess:
    browser = chromium()
    if browser is None:
        raise RuntimeError("no chromium on PATH (apt-get install chromium)")
    with tempfile.TemporaryDirectory() as profile:  # a fresh profile: no state shared between runs
        return subprocess.run([browser, *FLAGS, f"--user-data-dir={profile}", *args], capture_output=True,
                              text=True, timeout=timeout)


def dump_dom(page: Path) -> tuple[str, str]:
    """(DOM after the load event and its scripts, Chromium's stderr with console messages at log level 0)."""
    r = _run(["--enable-logging=stderr", "--v=0", "--virtual-time-budget=10000", "--dump-dom", page.resolve().as_uri()])
    return r.stdout, r.stderr


def screenshot(page: Path, png: Path, width: int = 1280, height: int = 6000, palette: bool = False) -> Path:
    """A full-width screenshot of `page`, the blank space below the content trimmed (`palette`: 256 colours, a
    quarter of the bytes, for the copy committed under docs/)."""
    _run([f"--window-size={width},{height}", f"--screenshot={png.resolve()}", page.resolve().as_uri()])
    from PIL import Image, ImageChops

    with Image.open(png) as im:
        rgb = im.convert("RGB")
    box = ImageChops.difference(rgb, Image.new("RGB", rgb.size, (255, 255, 255))).getbbox()
    if box is not None:
        rgb = rgb.crop((0, 0, width, min(box[3] + 24, rgb.height)))
    (rgb.quantize(colors=256) if palette else rgb).save(png, optimize=True)
    return png


def main() -> int:
    from cli.main import app

    out = ROOT / "docs" / "report.png"
    with tempfile.TemporaryDirectory() as tmp:
        page = Path(tmp) / "report.html"
        app(["report", *README_EXAMPLE, "-o", str(page)], standalone_mode=False)
        screenshot(page, out, palette=True)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
