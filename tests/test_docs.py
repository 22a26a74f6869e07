"""The documentation cannot rot: ``docs/api.md``'s runnable examples run, its signatures, enum tables
and error-code table match the package, and every relative link in the repository's Markdown
files resolves, anchors included.

Conventions in ``docs/api.md``: a fenced ``python`` block whose first line is ``# runnable`` is an
example that runs as written (in a fresh process, on the host device); a fenced ``c`` block whose
first line is ``/* <name>.c */`` is a host program the examples load as ``<name>.so``.
"""

from __future__ import annotations

import ast
import inspect
import os
import re
import shutil
import subprocess
import sys
import unicodedata
from enum import Enum
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest

import offloadrt
from offloadrt import api, types

ROOT = Path(__file__).resolve().parent.parent
API_DOC = ROOT / "docs" / "api.md"
LLVM_HEADER = Path("/usr/lib/llvm-22/include/offload/OffloadAPI.h")

FENCE = re.compile(r"^(```|~~~)")


# ---- reading Markdown ------------------------------------------------------------------------------

def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(language, body) of every fenced code block, in order."""
    return [(m.group(1), m.group(2)) for m in re.finditer(r"^```(\w*)\n(.*?)^```", text, flags=re.S | re.M)]


def prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) of the lines outside fenced code blocks."""
    lines, fenced = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append((number, line))
    return lines


def heading_text(raw: str) -> str:
    """A heading's text as GitHub renders it: links and emphasis reduced to their words."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", raw)
    text = re.sub(r"<[^>]+>", "", text)
    return text.replace("`", "").replace("*", "").strip()


def slug(text: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = heading_text(text).lower()
    text = "".join(ch for ch in text if ch in " -_" or unicodedata.category(ch)[0] in "LNM")
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every anchor a link may name in ``path``: heading slugs (repeats get -1, -2, ...) and HTML ids."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    for _, line in prose_lines(path.read_text(encoding="utf-8")):
        heading = re.match(r"^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$", line)
        if heading:
            base = slug(heading.group(1))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
        found.update(re.findall(r"""<a\s+(?:name|id)=["']([^"']+)["']""", line))
    return found


def without_inline_code(line: str) -> str:
    return re.sub(r"(`+).*?\1", "", line)


LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")


def links(path: Path) -> list[tuple[int, str]]:
    """(line number, target) of every inline link, image and reference definition outside code."""
    found: list[tuple[int, str]] = []
    for number, line in prose_lines(path.read_text(encoding="utf-8")):
        line = without_inline_code(line)
        found.extend((number, m.group(1)) for m in LINK.finditer(line))
        ref = REFERENCE.match(line)
        if ref:
            found.append((number, ref.group(1)))
    return found


def markdown_files() -> list[Path]:
    """The repository's Markdown files: git's list where this is a checkout, else the tree."""
    try:
        listed = subprocess.run(["git", "ls-files", "-z", "*.md"], cwd=ROOT, capture_output=True, check=True,
                                timeout=30).stdout.decode()
        files = [ROOT / name for name in listed.split("\0") if name]
    except (OSError, subprocess.SubprocessError):
        files = [p for p in ROOT.rglob("*.md") if not any(part.startswith(".") for part in p.relative_to(ROOT).parts)]
    if API_DOC not in files:  # not yet committed: check it all the same
        files.append(API_DOC)
    return sorted(f for f in files if f.is_file())


def broken_links(path: Path, root: Path = ROOT) -> list[str]:
    """What is wrong with the relative links of ``path`` (nothing: an empty list)."""
    problems = []
    for number, target in links(path):
        if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target) or target.startswith("//"):
            continue  # http:, https:, mailto: ... are not checked here
        where, _, anchor = target.partition("#")
        resolved = (path.parent / unquote(where)).resolve() if where else path
        label = f"{path.relative_to(root)}:{number}: {target}"
        if where and not resolved.exists():
            problems.append(f"{label}: {where} does not exist")
            continue
        try:
            resolved.relative_to(root)
        except ValueError:
            problems.append(f"{label}: points outside the repository")
            continue
        if anchor:
            if resolved.suffix.lower() != ".md" or resolved.is_dir():
                problems.append(f"{label}: #{anchor} in a file that is not Markdown")
            elif unquote(anchor) not in anchors(resolved):
                problems.append(f"{label}: no heading or anchor #{anchor} in {resolved.relative_to(root)}")
    return problems


# ---- the link check ----------------------------------------------------------------------------------

def test_the_slugs_are_githubs() -> None:
    assert slug("1. Reading the mapping") == "1-reading-the-mapping"
    assert slug("Rule 4: handles") == "rule-4-handles"
    assert slug("`OFFLOAD_TRACE`") == "offload_trace"
    assert slug("NVIDIA GPUs (CUDA plugin)") == "nvidia-gpus-cuda-plugin"
    assert slug("Interpreter exit without olShutDown") == "interpreter-exit-without-olshutdown"
    assert slug("A [linked](x.md) heading") == "a-linked-heading"


def test_the_link_checker_finds_what_is_broken(tmp_path: Path) -> None:
    """The checker itself: a missing file, a missing anchor, a repeated heading's suffix."""
    page = tmp_path / "page.md"
    (tmp_path / "other.md").write_text("# Title\n## Same\n## Same\n")
    page.write_text("[ok](other.md#same-1) [bad](other.md#same-2) [gone](missing.md) "
                    "[self](#here) `[code](nowhere.md)`\n\n```\n[fenced](nowhere.md)\n```\n## Here\n")
    problems = broken_links(page, root=tmp_path)
    assert len(problems) == 2, problems
    assert "other.md#same-2" in problems[0] and "missing.md" in problems[1]


def test_every_relative_link_in_the_repository_resolves() -> None:
    files = markdown_files()
    assert API_DOC in files and ROOT / "README.md" in files
    problems = [problem for path in files for problem in broken_links(path)]
    assert not problems, "broken links:\n" + "\n".join(problems)


def test_the_api_reference_links_are_checked() -> None:
    """The reference's own cross-references are many; make sure the checker sees them."""
    targets = [target for _, target in links(API_DOC)]
    assert sum(target.startswith("#") for target in targets) >= 40, targets
    assert "../README.md#nvidia-gpus-cuda-plugin" in targets


# Documents the team keeps outside the repository, which users cannot read: Markdown must not cite them.
PRIVATE_CITATIONS = re.compile(
    r"API contract|\bthe contract\b|contract rule|contract's|reference §|reference's file list"
    r"|liboffload-api\.md|api-contract\.md|DEVELOPERS\.md|conventions\.md|plugin-interface\.md|/work/shared",
    re.IGNORECASE)


def private_citations(path: Path) -> list[str]:
    return [f"{path.relative_to(ROOT)}:{number}: {match.group(0)!r}"
            for number, line in prose_lines(path.read_text(encoding="utf-8"))
            for match in PRIVATE_CITATIONS.finditer(line)]


def test_the_api_reference_cites_no_private_document() -> None:
    assert private_citations(API_DOC) == []


def test_no_markdown_file_cites_a_document_outside_the_repository() -> None:
    found = [citation for path in markdown_files() for citation in private_citations(path)]
    assert not found, "citations of documents users cannot read:\n" + "\n".join(found)


# ---- the reference matches the package ----------------------------------------------------------------

def api_text() -> str:
    return API_DOC.read_text(encoding="utf-8")


def sections(level: int) -> dict[str, str]:
    """Heading text → the Markdown under it, for the headings of ``level`` (up to the next heading
    of the same or a higher level; headings inside code blocks do not count)."""
    lines = api_text().splitlines()
    headings = []  # (line index, level, text)
    for number, line in prose_lines(api_text()):
        match = re.match(r"^(#{1,6}) (.+)$", line)
        if match:
            headings.append((number - 1, len(match.group(1)), match.group(2).strip()))
    out = {}
    for index, (start, depth, text) in enumerate(headings):
        if depth != level:
            continue
        end = next((s for s, d, _ in headings[index + 1:] if d <= level), len(lines))
        out[text] = "\n".join(lines[start + 1:end])
    return out


ENTRY_POINTS = sorted(name for name in api.__all__ if name.startswith("ol") and not name.endswith("WithCodeLoc"))


def documented_signature(name: str) -> inspect.Signature:
    body = sections(4)[name]
    line = next(line for line in body.splitlines() if line.startswith(f"{name}("))
    tree = ast.parse(f"def {line}: pass")
    func = tree.body[0]
    assert isinstance(func, ast.FunctionDef)
    defaults = [ast.literal_eval(d) for d in func.args.defaults]
    positional = func.args.args
    params = [inspect.Parameter(a.arg, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                default=defaults[i - (len(positional) - len(defaults))]
                                if i >= len(positional) - len(defaults) else inspect.Parameter.empty)
              for i, a in enumerate(positional)]
    return inspect.Signature(params)


@pytest.mark.parametrize("name", ENTRY_POINTS)
def test_every_entry_point_has_a_section_with_its_real_signature(name: str) -> None:
    assert name in sections(4), f"docs/api.md has no '#### {name}' section"
    real = inspect.signature(getattr(api, name))
    real = real.replace(parameters=[p.replace(annotation=inspect.Parameter.empty) for p in real.parameters.values()],
                        return_annotation=inspect.Signature.empty)
    assert documented_signature(name) == real
    body = sections(4)[name]
    assert "Errors" in body, f"{name}: no errors listed"


def enum_table(heading: str) -> dict[str, list[str]]:
    """The rows of the first table under ``### heading``: member name → the other cells."""
    rows = {}
    for line in sections(3)[heading].splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        member = re.fullmatch(r"`([A-Z_0-9]+)`", cells[0]) if cells else None
        if line.startswith("|") and member:
            rows[member.group(1)] = cells[1:]
        elif rows and not line.startswith("|"):
            break
    return rows


ENUMS = [offloadrt.PlatformInfo, offloadrt.PlatformBackend, offloadrt.DeviceType, offloadrt.DeviceInfo,
         offloadrt.FpCapabilityFlag, offloadrt.AllocType, offloadrt.MemInfo, offloadrt.QueueInfo,
         offloadrt.EventInfo, offloadrt.SymbolKind, offloadrt.SymbolInfo]
INFO_KINDS: dict[type[Enum], dict[Any, types.ValueKind]] = {
    offloadrt.PlatformInfo: types.PLATFORM_INFO_KINDS, offloadrt.DeviceInfo: types.DEVICE_INFO_KINDS,
    offloadrt.MemInfo: types.MEM_INFO_KINDS, offloadrt.QueueInfo: types.QUEUE_INFO_KINDS,
    offloadrt.EventInfo: types.EVENT_INFO_KINDS, offloadrt.SymbolInfo: types.SYMBOL_INFO_KINDS,
}


@pytest.mark.parametrize("enum", ENUMS, ids=lambda e: e.__name__)
def test_every_enum_member_is_documented_with_its_value(enum: type[Enum]) -> None:
    rows = enum_table(enum.__name__)
    assert {name: int(cells[0]) for name, cells in rows.items()} == {m.name: int(m.value) for m in enum}
    kinds = INFO_KINDS.get(enum)
    if kinds is not None:  # info enums: the size column is what olGet*InfoSize reports
        for member in enum:
            size = rows[member.name][2]
            kind = kinds[member]
            expected = "strlen + 1" if kind is types.ValueKind.STRING else str(types.FIXED_SIZES[kind])
            assert size == expected, f"{enum.__name__}.{member.name}: size {size}, expected {expected}"


def error_code_rows() -> dict[str, list[str]]:
    return enum_table("Errors")


def test_the_error_code_table_has_every_code_with_offloadrts_number() -> None:
    rows = error_code_rows()
    assert {name: int(cells[0]) for name, cells in rows.items()} == {c.name: int(c) for c in offloadrt.ErrorCode}


def test_the_error_code_table_has_llvm_22s_numbers() -> None:
    if not LLVM_HEADER.is_file():
        pytest.skip(f"LLVM 22's header is not installed ({LLVM_HEADER})")
    llvm = {m.group(1): int(m.group(2)) for m in re.finditer(r"OL_ERRC_(\w+) = (\d+),", LLVM_HEADER.read_text())}
    llvm.pop("LAST", None)
    documented = {name: cells[1] for name, cells in error_code_rows().items()}
    assert {name: int(v) for name, v in documented.items() if v != "—"} == llvm
    assert [name for name, v in documented.items() if v == "—"] == ["QUEUE_ERROR"]


# ---- the runnable examples ------------------------------------------------------------------------------

def c_sources() -> dict[str, str]:
    sources = {}
    for language, body in fenced_blocks(api_text()):
        first = re.match(r"/\* (\w+)\.c \*/", body)
        if language == "c" and first:
            sources[first.group(1)] = body
    return sources


def runnable_examples() -> list[tuple[str, str]]:
    """(the heading above it, the code) of every ``# runnable`` python block."""
    text = api_text()
    examples = []
    for match in re.finditer(r"^```python\n(# runnable\n.*?)^```", text, flags=re.S | re.M):
        heading = re.findall(r"^#{2,4} (.+)$", text[:match.start()], flags=re.M)[-1]
        examples.append((heading, match.group(1)))
    return examples


EXAMPLES = runnable_examples()


def test_the_reference_has_runnable_examples_and_their_c_files() -> None:
    assert len(EXAMPLES) >= 5
    assert "demo" in c_sources()
    for heading, code in EXAMPLES:
        for program in re.findall(r'open\("(\w+)\.so"', code):
            assert program in c_sources(), f"example '{heading}' loads {program}.so, which the doc does not define"


@pytest.fixture(scope="module")
def built_examples(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with every C file of the reference built into ``<name>.so``."""
    compiler = shutil.which("cc")
    if compiler is None:
        pytest.skip("no C compiler (cc) to build the reference's host programs")
    folder = tmp_path_factory.mktemp("api-examples")
    for name, source in c_sources().items():
        (folder / f"{name}.c").write_text(source)
        subprocess.run([compiler, "-shared", "-fPIC", "-O2", "-Wall", "-Werror", "-I", offloadrt.get_include(),
                        f"{name}.c", "-o", f"{name}.so"], cwd=folder, check=True, capture_output=True, timeout=60)
    return folder


@pytest.mark.parametrize("heading,code", EXAMPLES, ids=[heading for heading, _ in EXAMPLES])
def test_runnable_example(built_examples: Path, heading: str, code: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OFFLOAD_") and k != "PYTHONWARNINGS"}
    result = subprocess.run([sys.executable, "-X", "faulthandler", "-c", code], cwd=built_examples,
                            capture_output=True, text=True, timeout=60, env=env, check=False)
    assert result.returncode == 0, f"example '{heading}' failed:\n{result.stdout}\n{result.stderr}"
    assert "Warning" not in result.stderr, f"example '{heading}' left work or a failure behind:\n{result.stderr}"
