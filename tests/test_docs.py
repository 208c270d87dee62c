"""The documentation a newcomer reads first: README stays short, its set-up commands are the ones CI runs, and every
relative link in README.md, CHANGELOG.md and docs/*.md leads to a file (and heading) that exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
MAX_README_LINES = 220  # issue 23: the way in, about 200 lines; the rest lives in docs/
MAIN_JOB = "pip install . && plan --model llama70b --cluster h100x512"
TEST_COMMAND = 'pip install -e ".[test]" && python -m pytest'

FENCE = re.compile(r"^(```|~~~)")
LINK = re.compile(r"!?\[[^\]]*\]\(([^()\s]+)\)")
HTML_LINK = re.compile(r'(?:href|src)="([^"]+)"')


def _pages() -> list[Path]:
    return [README, ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md"))]


def _prose(text: str) -> list[str]:
    """The lines outside fenced code blocks (links and headings inside code are not markdown)."""
    out, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line.strip()):
            fenced = not fenced
            continue
        if not fenced:
            out.append(line)
    return out


def _anchors(path: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens, repeats numbered."""
    seen: dict[str, int] = {}
    for line in _prose(path.read_text()):
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        slug = re.sub(r"[^\w\- ]", "", m.group(1).lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        if n:
            seen[f"{slug}-{n}"] = 1
    return set(seen)


def _links(path: Path) -> list[str]:
    """Relative link targets (web addresses and in-page anchors of other schemes left out)."""
    found = []
    for line in _prose(path.read_text()):
        line = re.sub(r"`[^`]*`", "", line)  # inline code is not a link
        targets = LINK.findall(line) + HTML_LINK.findall(line)
        found += [t for t in targets if not re.match(r"^[a-z][a-z0-9+.-]*:", t)]
    return found


def test_readme_is_short() -> None:
    lines = len(README.read_text().splitlines())
    assert lines <= MAX_README_LINES, f"README.md has {lines} lines; move detail to docs/ (at most {MAX_README_LINES})"


@pytest.mark.parametrize("page", _pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page: Path) -> None:
    links = _links(page)
    broken = []
    for target in links:
        file, _, anchor = target.partition("#")
        dest = (page.parent / file).resolve() if file else page
        if not dest.exists():
            broken.append(f"{target}: no file {dest.relative_to(ROOT) if dest.is_relative_to(ROOT) else dest}")
        elif anchor and (dest.suffix != ".md" or anchor not in _anchors(dest)):
            broken.append(f"{target}: no heading #{anchor} in {dest.name}")
    assert not broken, f"{page.name}: " + "; ".join(broken)


def test_link_checker_sees_a_broken_link_and_a_broken_anchor(tmp_path: Path) -> None:
    """The checker itself can fail: a missing file and a missing heading are both caught."""
    (tmp_path / "a.md").write_text("# Title: `x` here\n\n[ok](#title-x-here) [gone](b.md) [bad](#nope)\n"
                                   '<img src="pic.png">\n```\n[in code](c.md)\n```\n')
    assert _links(tmp_path / "a.md") == ["#title-x-here", "b.md", "#nope", "pic.png"]
    assert _anchors(tmp_path / "a.md") == {"title-x-here"}


def _bash_blocks(text: str) -> list[str]:
    return [b.strip() for b in re.findall(r"```bash\n(.*?)```", text, flags=re.S)]


def test_readme_gives_the_two_setup_commands() -> None:
    blocks = _bash_blocks(README.read_text())
    assert MAIN_JOB in blocks, "README must give the main job as one command: " + MAIN_JOB
    assert TEST_COMMAND in blocks, "README must give the test command as one command: " + TEST_COMMAND


def test_ci_runs_the_readme_test_command() -> None:
    """.ci/run installs the package as README says and runs README's test command, word for word."""
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    install, test = (part.strip() for part in TEST_COMMAND.split("&&"))
    assert test in [line.strip() for line in ci], f".ci/run does not run `{test}` on a line of its own"
    # `python -m pip install -q X` is README's `pip install X` run quietly with the venv's pip
    normalised = [re.sub(r"^(\S*/)?python -m pip install( -q)?", "pip install", line.strip()) for line in ci]
    assert install in normalised, f".ci/run does not install as README does: `{install}`"
    assert "pip install ." in normalised, ".ci/run does not check the non-editable install of README's main job"
