"""The README and docs/*.md stay true to the repository: every relative link points at a file that exists (and,
for a link into a Markdown page, at a heading that page has), and the README's first table names exactly the
tracks of images/tracks.toml."""

import re
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def outside_code(text: str) -> str:
    """The page without its fenced code blocks and inline code, where a `](...)` is no link."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    return re.sub(r"`[^`\n]*`", "", text)


def anchors(page: Path) -> set[str]:
    """GitHub's ids for a page's headings: lower case, punctuation dropped, spaces to hyphens."""
    ids = set()
    for heading in re.findall(r"^#+ (.+)$", outside_code(page.read_text()), re.M):
        ids.add(re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-"))
    return ids


def relative_links(page: Path) -> list[str]:
    return [link for link in LINK.findall(outside_code(page.read_text())) if not re.match(r"[a-z]+:", link)]


def test_every_relative_link_points_at_a_file_that_exists():
    broken = []
    for page in PAGES:
        for link in relative_links(page):
            path, _, anchor = link.partition("#")
            target = (page.parent / path).resolve() if path else page
            if not target.exists():
                broken.append(f"{page.relative_to(REPO)}: {link} (no such file)")
            elif anchor and target.suffix == ".md" and anchor not in anchors(target):
                broken.append(f"{page.relative_to(REPO)}: {link} (no such heading)")
    assert not broken, "\n".join(broken)


def test_the_links_are_found():
    """The check above reads links at all: the README links to every docs page."""
    linked = {(REPO / link.partition("#")[0]).resolve() for link in relative_links(REPO / "README.md")}
    assert set(PAGES[1:]) <= linked, set(PAGES[1:]) - linked


def test_the_readmes_first_table_names_exactly_the_tracks():
    readme = (REPO / "README.md").read_text()
    lines = readme.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append(line.split("|")[1].strip(" `"))
    tracks = list(tomllib.loads((REPO / "images" / "tracks.toml").read_text())["tracks"])
    assert sorted(rows) == sorted(tracks) and len(rows) == len(set(rows)), (rows, tracks)
