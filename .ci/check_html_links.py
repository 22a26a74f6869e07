"""Check a built HTML site offline: every relative link, image, script and stylesheet resolves, with
its #anchor, and no page loads anything from the network.

    python .ci/check_html_links.py docs/_build/html

Links to other sites (http:, https:, mailto:) are not followed: this check needs no network. A page
that would load a script, stylesheet, font or image from another site is an error, because the
site must work offline. Exit status 1, with one line per problem, when anything is wrong.
"""

from __future__ import annotations

import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

# attributes that name something the browser loads with the page (not a link the reader follows)
LOADED = {("script", "src"), ("link", "href"), ("img", "src"), ("source", "src"), ("iframe", "src"),
          ("video", "src"), ("audio", "src"), ("embed", "src"), ("object", "data")}
# <link rel=...> values that are links for the reader or for crawlers, not loaded with the page
NOT_LOADED_RELS = {"index", "search", "next", "prev", "canonical", "author", "help", "license", "alternate"}


class Page(HTMLParser):
    """The ids a page defines and the references it makes: (tag, attribute, value, line)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.ids: set[str] = set()
        self.refs: list[tuple[str, str, str, int]] = []
        self.rels: dict[int, set[str]] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {name: value or "" for name, value in attrs}
        for name in ("id", "name") if tag in ("a", "map") else ("id",):
            if values.get(name):
                self.ids.add(values[name])
        for name in ("href", "src", "data"):
            if name in values:
                line = self.getpos()[0]
                self.refs.append((tag, name, values[name], line))
                if tag == "link":
                    self.rels[len(self.refs) - 1] = set(values.get("rel", "").lower().split())

    handle_startendtag = handle_starttag


def parse(path: Path) -> Page:
    page = Page()
    page.feed(path.read_text(encoding="utf-8", errors="replace"))
    page.close()
    return page


def check(site: Path) -> list[str]:
    """Every problem with the links of the HTML files under ``site`` (none: an empty list)."""
    site = site.resolve()
    pages = {path: parse(path) for path in sorted(site.rglob("*.html"))}
    problems = []
    for path, page in pages.items():
        where = path.relative_to(site).as_posix()
        for index, (tag, attribute, value, line) in enumerate(page.refs):
            label = f"{where}:{line}: <{tag} {attribute}={value!r}>"
            parts = urlsplit(value)
            rels = page.rels.get(index, set())
            loaded = (tag, attribute) in LOADED and not (tag == "link" and rels and rels <= NOT_LOADED_RELS)
            if parts.scheme or value.startswith("//"):
                if loaded and parts.scheme in ("http", "https", ""):
                    problems.append(f"{label}: loads from the network (the site must work offline)")
                continue  # a link to another site: not followed
            if not parts.path and not parts.fragment:
                continue  # href="" (the page itself)
            target = (path.parent / unquote(parts.path)).resolve() if parts.path else path
            try:
                target.relative_to(site)
            except ValueError:
                problems.append(f"{label}: points outside the site")
                continue
            if target.is_dir():
                target = target / "index.html"
            if not target.is_file():
                problems.append(f"{label}: {target.relative_to(site).as_posix()} does not exist")
                continue
            fragment = unquote(parts.fragment)
            if fragment and target.suffix == ".html":
                ids = pages[target].ids if target in pages else parse(target).ids
                if fragment not in ids:
                    problems.append(f"{label}: no id {fragment!r} in {target.relative_to(site).as_posix()}")
    if not pages:
        problems.append(f"{site}: no HTML pages")
    return problems


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    site = Path(argv[1])
    problems = check(site)
    for problem in problems:
        print(problem)
    pages = len(list(site.rglob("*.html")))
    print(f"{pages} pages checked: {len(problems)} broken link(s)" if problems
          else f"{pages} pages checked: every internal link and anchor resolves, nothing loads from the network")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
