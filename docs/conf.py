"""Sphinx configuration of offloadrt's documentation site.

Build: ``python -m pip install '.[docs]' && python -m sphinx -W -b html docs docs/_build/html``.

The chapters are the repository's Markdown files as they are (docs/*.md here; README.md,
ARCHITECTURE.md and benchmarks/results/summary.md through small ``{include}`` pages). Their links
are written for GitHub, relative to where each file lives; ``rewrite_links`` maps them at read time
to the pages that show those files on the site, so no file needs a second, site-only copy.
The ``ol*`` reference page (reference.md) is generated: autodoc over ``offloadrt.api`` for every entry
point in ``offloadrt.api.__all__``, followed by its errors as docs/api.md lists them.
"""

from __future__ import annotations

import functools
import os
import re
import sys
import warnings
from pathlib import Path
from typing import Any

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path.insert(0, str(ROOT))  # autodoc imports the checkout's offloadrt, installed or not

import offloadrt  # noqa: E402

# sphinx-autodoc-typehints 3.6 calls an API Sphinx 9 deprecates, once per docstring: not ours to fix
warnings.filterwarnings("ignore", message=".*set_application.*is deprecated", module="sphinx_autodoc_typehints.*")

project = "offloadrt"
author = "offloadrt contributors"
copyright = "offloadrt contributors"  # noqa: A001
release = version = offloadrt.__version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx_autodoc_typehints",
    "sphinx_copybutton",
]

source_suffix = {".md": "markdown"}
root_doc = "index"
# docs/_*.md are drafts (docs/_pending_*.md) waiting to join a chapter: not pages of the site
exclude_patterns = ["_build", "_*.md", "examples", "Thumbs.db", ".DS_Store"]
templates_path = ["_templates"]

# GitHub's heading anchors (#4-host-kernels, #olmemcpy), which every existing link uses
myst_heading_anchors = 6
myst_enable_extensions = ["colon_fence"]
myst_links_external_new_tab = False

autodoc_member_order = "bysource"
autodoc_typehints = "signature"
typehints_use_signature = True
typehints_use_signature_return = True
always_document_param_types = False
typehints_document_rtype = False

copybutton_prompt_text = r"\$ "
copybutton_prompt_is_regexp = True

html_theme = "furo"
html_title = f"offloadrt {release}"
html_static_path = ["_static"]
html_css_files = ["offloadrt.css"]
html_theme_options = {
    "source_directory": "docs/",
    "navigation_with_keys": True,
}
html_last_updated_fmt = None
html_copy_source = False
html_show_sourcelink = False

# ---- links written for GitHub, mapped to the site's pages ----------------------------------------------

# repository path -> the site page (relative to docs/) that shows it; "#..." keeps the link's own anchor
SITE_PAGES = {
    "README.md": "overview.md",
    "ARCHITECTURE.md": "architecture.md",
    "benchmarks/results/summary.md": "benchmarks.md",
    "benchmarks/results": "benchmarks.md",
    "examples": "examples.md",
}
EXAMPLE_FILE = re.compile(r"^examples/(\w+)\.(py|c)$")

LINK = re.compile(r"(!?\[(?:[^\[\]]|\[[^\]]*\])*\]\()(\s*<?)([^)\s>]+)(>?(?:\s+\"[^\"]*\")?\s*\))")
FENCE = re.compile(r"^\s*(```|~~~)")


def site_target(target: str, source: Path, page_dir: Path) -> str:
    """Where a relative link ``target`` written in ``source`` points on the site, relative to ``page_dir``.

    Links to a page of the site stay links to it (anchor kept); links to other repository files
    (headers, schemas, images) point at the file itself, relative to the page that shows them.
    """
    if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target) or target.startswith(("#", "//")):
        return target
    where, hash_, anchor = target.partition("#")
    resolved = Path(os.path.normpath(source.parent / where))
    try:
        in_repo = resolved.relative_to(ROOT).as_posix()
    except ValueError:
        return target
    page = SITE_PAGES.get(in_repo.rstrip("/"))
    example = EXAMPLE_FILE.match(in_repo)
    if example and not anchor:
        page, hash_, anchor = "examples.md", "#", example.group(1)
    if page is not None:
        resolved = DOCS / page
    return Path(os.path.relpath(resolved, page_dir)).as_posix() + hash_ + anchor


def rewrite_links(text: str, source: Path, page_dir: Path) -> str:
    """``text`` (Markdown from ``source``) with every relative link outside code made right for a page in
    ``page_dir``."""
    def rewrite(match: re.Match[str], code: list[tuple[int, int]]) -> str:
        if any(start <= match.start() < end for start, end in code):
            return match.group(0)
        return match.group(1) + match.group(2) + site_target(match.group(3), source, page_dir) + match.group(4)

    out, fenced = [], False
    for line in text.splitlines(keepends=True):
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            code = [m.span() for m in re.finditer(r"(`+).*?\1", line)]  # inline code spans stay as they are
            line = LINK.sub(functools.partial(rewrite, code=code), line)
        out.append(line)
    return "".join(out)


# ---- the ol* reference: autodoc, then the errors docs/api.md lists ----------------------------------------

API_DOC = DOCS / "api.md"
ENTRY_POINTS_MARKER = "<!-- entry points: generated by conf.py -->"


def api_sections() -> list[tuple[str, list[tuple[str, str]]]]:
    """(area, [(entry point, its Markdown)]) of docs/api.md's "2. Entry points", in its order."""
    text = API_DOC.read_text(encoding="utf-8")
    part = text.split("\n## 2. Entry points", 1)[1].split("\n## 3.", 1)[0]
    areas = []
    for area in re.split(r"^### ", part, flags=re.M)[1:]:
        title, _, body = area.partition("\n")
        entries = [(chunk.partition("\n")[0].strip(), chunk.partition("\n")[2])
                   for chunk in re.split(r"^#### ", body, flags=re.M)[1:]]
        areas.append((title.strip(), entries))
    return areas


def errors_of(body: str) -> str:
    """The paragraph of one entry point's section that gives its errors (Markdown, with its list)."""
    paragraphs = [p.strip("\n") for p in re.split(r"\n\s*\n", re.sub(r"^```.*?^```", "", body, flags=re.S | re.M))]
    return next((p for p in paragraphs if p.startswith("Errors")), None) or next(
        (p for p in paragraphs if "Errors" in p), "")


def reference_markdown() -> str:
    """The entry points, by area as docs/api.md groups them: each one's docstring (autodoc) and errors."""
    from offloadrt import api

    documented = set()
    out = []
    for area, entries in api_sections():
        out.append(f"\n## {area}\n")
        for name, body in entries:
            if not hasattr(api, name):
                continue
            documented.add(name)
            errors = re.sub(r"\]\(#", "](api.md#", errors_of(body))
            out.append(f"```{{eval-rst}}\n.. autofunction:: offloadrt.api.{name}\n```\n")
            out.append(f":::{{container}} ol-errors\n{errors}\n\nThe full entry: [{name} in the API reference]"
                       f"(api.md#{name.lower()}).\n:::\n")
    missing = sorted(n for n in api.__all__ if n.startswith("ol") and not n.endswith("WithCodeLoc")
                     and n not in documented)
    if missing:  # an entry point docs/api.md has no section for: still on the page, under its own heading
        out.append("\n## Not yet in docs/api.md\n")
        out.extend(f"```{{eval-rst}}\n.. autofunction:: offloadrt.api.{name}\n```\n" for name in missing)
    return "\n".join(out)


# ---- GPU runs of the examples, where benchmarks/gpu_check.py recorded one ----------------------------------

GPU_RUNS_MARKER = "<!-- gpu runs: generated by conf.py -->"
RESULTS = ROOT / "benchmarks" / "results"


def gpu_runs_markdown() -> str:
    """The example lines of every gpu_check record in benchmarks/results, labelled with its file (date and
    device), or a sentence saying there is none."""
    records = sorted(RESULTS.glob("gpu_check-*.txt"))
    lines_of = {path: [line for line in path.read_text(encoding="utf-8", errors="replace").splitlines()
                       if re.search(r"\bexamples?\b", line) and re.match(r"\s*(PASS|FAIL|SKIP)", line)]
                for path in records}
    shown = {path: lines for path, lines in lines_of.items() if lines}
    if not shown:
        return ("No GPU run of the examples is recorded in `benchmarks/results/` yet: the outputs below are "
                "from the host device only, and these examples have not been run on a GPU for this site.")
    out = ["Recorded GPU runs (from `benchmarks/gpu_check.py`; the file name gives the UTC date and the "
           "device):\n"]
    for path, lines in shown.items():
        out.append(f"`benchmarks/results/{path.name}`:\n\n```text\n" + "\n".join(lines) + "\n```\n")
    return "\n".join(out)


# ---- hooks ------------------------------------------------------------------------------------------------

def on_source_read(app: Any, docname: str, source: list[str]) -> None:
    path = Path(app.env.doc2path(docname))
    text = source[0]
    if ENTRY_POINTS_MARKER in text:
        text = text.replace(ENTRY_POINTS_MARKER, reference_markdown())
    if GPU_RUNS_MARKER in text:
        text = text.replace(GPU_RUNS_MARKER, gpu_runs_markdown())
    source[0] = rewrite_links(text, path, path.parent)


def on_include_read(app: Any, relative_path: Path, parent_docname: str, content: list[str]) -> None:
    included = Path(os.path.normpath(DOCS / relative_path))
    if included.suffix == ".md":
        page_dir = Path(app.env.doc2path(parent_docname)).parent
        content[0] = rewrite_links(content[0], included, page_dir)


def setup(app: Any) -> dict[str, Any]:
    app.connect("source-read", on_source_read)
    app.connect("include-read", on_include_read)
    return {"parallel_read_safe": True}
