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
