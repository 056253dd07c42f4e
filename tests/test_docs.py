"""The README and the pages in docs/ stay short, linked and written for the people who use the package."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
# words about where and how the package itself is built, which mean nothing to its users
NOT_FOR_USERS = ("this machine", "the issue", "device time", "$OUT", "this session", "on this box")


def test_readme_is_short():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 250


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_relative_links_resolve(page):
    for target in LINK.findall(page.read_text()):
        if "://" in target or target.startswith("mailto:"):
            continue
        assert (page.parent / target).exists(), f"{page.name} links to {target}, which does not exist"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_pages_speak_to_users(page):
    text = page.read_text().lower()
    found = [w for w in NOT_FOR_USERS if w.lower() in text]
    assert not found, f"{page.name} speaks of {found}"


def test_every_docs_page_is_linked_from_the_readme():
    readme = (ROOT / "README.md").read_text()
    for page in PAGES[1:]:
        assert f"docs/{page.name}" in readme, f"docs/{page.name} is not linked from the README"


def test_ci_runs_the_test_commands_the_docs_show():
    """``.ci/run`` runs the ``make`` commands of docs/development.md's test block, in the same order."""
    ci = [
        line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines() if line.startswith("make ")
    ]
    text = (ROOT / "docs" / "development.md").read_text()
    block = text.split("## Tests", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    shown = [line.split("#", 1)[0].strip() for line in block.strip().splitlines()]
    assert ci == shown


def test_readme_says_how_to_run_the_commands_without_activating():
    readme = (ROOT / "README.md").read_text()
    for text in ("make run", "make test", ".venv/bin/openclaw-trl", "source .venv/bin/activate"):
        assert text in readme, text
    assert "## Layout" not in readme and "## Tests" not in readme  # developer pages: docs/development.md
