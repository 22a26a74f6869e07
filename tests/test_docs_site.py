"""The documentation site's sources stay true without building it (``.ci/docs`` builds it and checks its links):

- the examples gallery's recorded outputs (docs/examples/) belong to the examples as they are now, and one
  example, run again, prints what was recorded;
- docs/conf.py maps the Markdown files' GitHub links to the site's pages, and its generated ``ol*``
  reference has every entry point with a docstring and its errors;
- the offline link checker (.ci/check_html_links.py) finds broken links, missing anchors and pages that
  load from the network.

None of this needs Sphinx.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from offloadrt import api

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
RECORDED = DOCS / "examples"


def load(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def conf() -> ModuleType:
    return load(DOCS / "conf.py", "offloadrt_docs_conf")


@pytest.fixture(scope="module")
def regenerate() -> ModuleType:
    return load(RECORDED / "regenerate.py", "offloadrt_docs_regenerate")


@pytest.fixture(scope="module")
def links() -> ModuleType:
    return load(ROOT / ".ci" / "check_html_links.py", "offloadrt_check_html_links")


# ---- the examples gallery ---------------------------------------------------------------------------------

EXAMPLE_SCRIPTS = sorted(p.stem for p in (ROOT / "examples").glob("*.py") if p.stem != "kernels")


@pytest.mark.parametrize("name", EXAMPLE_SCRIPTS)
def test_every_example_is_in_the_gallery_with_a_current_recorded_output(name: str, regenerate: ModuleType) -> None:
    """Editing an example without `python docs/examples/regenerate.py` fails here (the digests differ)."""
    assert name in regenerate.RUNS, f"docs/examples/regenerate.py does not run examples/{name}.py"
    recorded = RECORDED / f"{name}.txt"
    assert recorded.is_file(), f"no recorded output {recorded.relative_to(ROOT)}"
    assert recorded.read_text().startswith(f"$ {' '.join(regenerate.RUNS[name])}\n")
    manifest = json.loads((RECORDED / "outputs.json").read_text())
    assert manifest[name]["sources"] == regenerate.digests(name), (
        f"examples/{name} changed since its output was recorded: run python docs/examples/regenerate.py")
    gallery = (DOCS / "examples.md").read_text()
    assert re.search(rf"^## {name}$", gallery, flags=re.M), f"docs/examples.md has no '## {name}' section"
    assert f"examples/{name}.txt" in gallery


def test_the_digests_cover_what_an_example_builds(regenerate: ModuleType) -> None:
    assert set(regenerate.digests("saxpy")) == {"examples/saxpy.py", "examples/saxpy.c", "examples/kernels.py"}
    assert set(regenerate.digests("mpi_saxpy")) == {"examples/mpi_saxpy.py", "examples/saxpy.c",
                                                     "examples/kernels.py"}


def device_names_elided(text: str) -> str:
    """Output with the device's name (the CPU's model) left out: it differs from machine to machine."""
    return re.sub(r"^(.* on \S+) \(.*\)(: .*)$", r"\1 (...)\2", text, flags=re.M)


def test_the_saxpy_example_prints_what_the_gallery_shows(regenerate: ModuleType) -> None:
    if shutil.which("cc") is None:
        pytest.skip("no C compiler (cc) to build examples/saxpy.c")
    recorded = (RECORDED / "saxpy.txt").read_text().split("\n", 1)[1]
    result = subprocess.run([sys.executable, "examples/saxpy.py", "host"], cwd=ROOT, capture_output=True, text=True,
                            timeout=120, env=regenerate.clean_env(), check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert device_names_elided(result.stdout + result.stderr) == device_names_elided(recorded)
    assert device_names_elided("saxpy on host:0 (AMD EPYC (r)): ok\n") == "saxpy on host:0 (...): ok\n"


# ---- docs/conf.py: links and the generated reference ------------------------------------------------------

def test_github_links_become_links_to_the_sites_pages(conf: ModuleType) -> None:
    readme, api_doc = ROOT / "README.md", DOCS / "api.md"
    cases = [
        ("../README.md#nvidia-gpus-cuda-plugin", api_doc, "overview.md#nvidia-gpus-cuda-plugin"),
        ("docs/api.md#olmemcpy", readme, "api.md#olmemcpy"),
        ("ARCHITECTURE.md", readme, "architecture.md"),
        ("examples/portable_saxpy.py", readme, "examples.md#portable_saxpy"),
        ("benchmarks/results/summary.md", readme, "benchmarks.md"),
        ("benchmarks/results/", readme, "benchmarks.md"),
        ("benchmarks/results/peer.png", readme, "../benchmarks/results/peer.png"),
        ("offloadrt/info.schema.json", readme, "../offloadrt/info.schema.json"),
        ("#rule-4-handles", api_doc, "#rule-4-handles"),
        ("https://llvm.org/docs/", api_doc, "https://llvm.org/docs/"),
    ]
    for target, source, expected in cases:
        assert conf.site_target(target, source, DOCS) == expected, target
    text = "[a](docs/api.md) `[b](docs/api.md)` [`c`](ARCHITECTURE.md#layers)\n```\n[d](docs/api.md)\n```\n"
    assert conf.rewrite_links(text, readme, DOCS) == (
        "[a](api.md) `[b](docs/api.md)` [`c`](architecture.md#layers)\n```\n[d](docs/api.md)\n```\n")


ENTRY_POINTS = sorted(n for n in api.__all__ if n.startswith("ol") and not n.endswith("WithCodeLoc"))


@pytest.mark.parametrize("name", ENTRY_POINTS)
def test_the_generated_reference_has_the_entry_point_with_its_docstring_and_errors(name: str,
                                                                                  conf: ModuleType) -> None:
    assert (getattr(api, name).__doc__ or "").strip(), f"offloadrt.api.{name} has no docstring for autodoc"
    page = conf.reference_markdown()
    block = page.split(f".. autofunction:: offloadrt.api.{name}\n", 1)
    assert len(block) == 2, f"reference.md would not document {name}"
    errors = block[1].split(".. autofunction::", 1)[0]
    assert "Errors" in errors and f"(api.md#{name.lower()})" in errors, errors
    assert "Not yet in docs/api.md" not in page


def test_every_site_page_is_in_the_navigation() -> None:
    index = (DOCS / "index.md").read_text()
    listed = set(re.findall(r"^(?:[^\n<]*<)?([\w-]+)>?$", "\n".join(
        block for block in re.findall(r"```\{toctree\}\n(.*?)```", index, flags=re.S)), flags=re.M))
    pages = {p.stem for p in DOCS.glob("*.md") if not p.name.startswith("_")} - {"index"}
    assert pages <= listed, f"pages missing from docs/index.md's toctrees: {sorted(pages - listed)}"


# ---- the offline link checker -----------------------------------------------------------------------------

def test_the_link_checker_finds_what_is_broken(tmp_path: Path, links: ModuleType) -> None:
    (tmp_path / "_static").mkdir()
    (tmp_path / "_static" / "site.css").write_text("")
    (tmp_path / "other.html").write_text('<html><body><section id="here">x</section><a name="old"></a></body></html>')
    (tmp_path / "index.html").write_text(
        '<html><head><link rel="stylesheet" href="_static/site.css">'
        '<link rel="stylesheet" href="https://cdn.example.com/font.css">'
        '<link rel="canonical" href="https://example.com/">'
        '<script src="https://cdn.example.com/x.js"></script></head><body id="top">\n'
        '<a href="other.html#here">ok</a> <a href="other.html#old">ok</a> <a href="#top">ok</a>\n'
        '<a href="other.html#gone">bad anchor</a> <a href="missing.html">bad file</a> <a href="#nowhere">bad</a>\n'
        '<a href="https://example.com/">external, not followed</a> <img src="_images/plot.png">\n'
        '</body></html>')
    problems = links.check(tmp_path)
    assert len(problems) == 6, problems
    assert sum("loads from the network" in p for p in problems) == 2, problems
    assert any("no id 'gone' in other.html" in p for p in problems)
    assert any("missing.html does not exist" in p for p in problems)
    assert any("no id 'nowhere' in index.html" in p for p in problems)
    assert any("_images/plot.png does not exist" in p for p in problems)
    (tmp_path / "other.html").unlink()
    os.remove(tmp_path / "index.html")
    assert links.check(tmp_path) == [f"{tmp_path}: no HTML pages"]
