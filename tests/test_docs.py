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


# The figures' history is git's history of bench/, and docs/benchmarks.md (made from bench/) names each result's
# commit: prose that names commits goes stale with every run, so the README and the other pages name none.
import subprocess  # noqa: E402  (here, with the test that needs it: this part was appended to the file)

GENERATED_PAGES = {REPO / "docs" / "benchmarks.md"}
HEX_WORD = re.compile(r"(?<![\w/.:-])[0-9a-f]{7,40}(?![\w/-])")


def commit_ids_in(text: str, commits: list[str]) -> list[str]:
    """The words of `text` that are a commit of `commits` (full ids), whole or shortened, in backticks or plain."""
    return sorted({word for word in HEX_WORD.findall(text) if any(commit.startswith(word) for commit in commits)})


def test_no_page_names_a_commit_in_its_prose():
    commits = subprocess.run(["git", "rev-list", "--all"], cwd=REPO, capture_output=True, text=True, check=True,
                             timeout=60).stdout.split()
    assert commits, "git rev-list --all listed no commit: run this in a clone of the repository"
    named = {}
    for page in PAGES:
        if page not in GENERATED_PAGES and (found := commit_ids_in(page.read_text(), commits)):
            named[str(page.relative_to(REPO))] = found
    assert not named, "pages that name commits (say what changed; bench/ and git keep when): " + "; ".join(
        f"{page}: {len(ids)} ({', '.join(ids[:5])}{', ...' if len(ids) > 5 else ''})" for page, ids in named.items())


def test_a_commit_id_is_found_in_backticks_or_plain_and_nothing_else_is():
    commits = ["a6dfebff80292725d59b0818fca924b454447d05", "dc5d2d51234567890abcdef1234567890abcdef0"]
    text = ("at `a6dfebf`, then dc5d2d5 (and a6dfebff80292725d59b0818fca924b454447d05); not image `fee15818a3f3`, "
            "not `sha256:a6dfebf00`, not 1234567, not dc5d2d5x or cafe/dc5d2d5")
    assert commit_ids_in(text, commits) == ["a6dfebf", "a6dfebff80292725d59b0818fca924b454447d05", "dc5d2d5"]
