"""What a portable source holds, read from one preprocessing of it: its kernels and their parameters,
its dynamic work-group arrays, and which kernels need their work-items to run as fibers on the host.

The preprocessing (:func:`analyse`) uses offloadrt's host ``<gpuintrin.h>`` with
``__OFFLOADRT_ANALYSIS__``, where ``__gpu_kernel`` and ``__gpu_local`` read as marks.

A kernel needs fibers when it may reach a call that makes work-items wait for each other
(a barrier, a lane operation, ``__gpu_exit``, ``__gpu_thread_suspend``). The check reads the
preprocessed source: every function definition is a node, and a function refers to every
identifier its body names; a kernel needs fibers when one of those calls is reachable. It
over-approximates (naming a function counts as calling it) and misses calls it cannot see
(through a function pointer kept in a table, a C++ operator): at run time such a call in a group
run as a loop stops the kernel with a fault rather than computing a wrong result.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from . import _clang, _declarations, _signature
from ._declarations import clean

INCLUDE = Path(__file__).resolve().parent.parent / "include"
GPU_INCLUDE = INCLUDE / "offloadrt" / "gpu"
SOURCE_NAME = {"c": "kernel.c", "c++": "kernel.cpp"}

FIBER_CALLS = frozenset({
    "__gpu_sync_threads", "__gpu_sync_lane", "__gpu_lane_mask", "__gpu_ballot", "__gpu_exit", "__gpu_thread_suspend",
    "__gpu_read_first_lane_u32", "__gpu_read_first_lane_u64", "__gpu_read_first_lane_f32",
    "__gpu_read_first_lane_f64", "__gpu_shuffle_idx_u32", "__gpu_shuffle_idx_u64", "__gpu_shuffle_idx_f32",
    "__gpu_shuffle_idx_f64", "__gpu_match_any_u32", "__gpu_match_any_u64", "__gpu_match_all_u32",
    "__gpu_match_all_u64", "__gpu_lane_sum_u32", "__gpu_lane_sum_u64", "__gpu_lane_sum_f32", "__gpu_lane_sum_f64",
    "__gpu_lane_scan_u32", "__gpu_lane_scan_u64", "__gpu_lane_scan_f32", "__gpu_lane_scan_f64",
})
_NOT_FUNCTIONS = {"if", "for", "while", "switch", "catch", "return", "sizeof", "alignof", "_Alignof", "decltype",
                  "__typeof__", "typeof", "defined", "__attribute__", "noexcept"}
Node = dict[str, Any]  # a node of clang's JSON syntax tree (-ast-dump=json)
_IDENT = re.compile(r"[A-Za-z_]\w*")
_TRAILER = re.compile(r"(?:\s|const\b|volatile\b|noexcept\b|override\b|final\b|&|->\s*[\w:<>*& ]+)*$")


def call_graph(text: str) -> dict[str, set[str]]:
    """Function name -> identifiers its definitions' bodies name (overloads merged)."""
    body = clean(text)
    graph: dict[str, set[str]] = {}
    for brace in [m.start() for m in re.finditer(r"\{", body)]:
        before = body[max(0, brace - 400):brace]
        trailer = _TRAILER.search(before)
        head = before[:trailer.start()] if trailer else before
        if not head.endswith(")"):
            continue
        depth, index = 0, len(head) - 1
        while index >= 0:
            if head[index] == ")":
                depth += 1
            elif head[index] == "(":
                depth -= 1
                if depth == 0:
                    break
            index -= 1
        name_match = re.search(r"([A-Za-z_]\w*)\s*$", head[:max(index, 0)])
        if name_match is None or name_match.group(1) in _NOT_FUNCTIONS:
            continue
        end = _block_end(body, brace)
        graph.setdefault(name_match.group(1), set()).update(_IDENT.findall(body[brace:end]))
    return graph


def _block_end(text: str, brace: int) -> int:
    depth = 0
    for index in range(brace, len(text)):
        if text[index] == "{":
            depth += 1
        elif text[index] == "}":
            depth -= 1
            if depth == 0:
                return index + 1
    return len(text)


def needs_fibers(kernel: str, graph: dict[str, set[str]]) -> bool:
    """Whether ``kernel`` may reach a barrier, a lane operation, ``__gpu_exit`` or ``__gpu_thread_suspend``."""
    return reaches(kernel, graph, FIBER_CALLS)


def reaches(kernel: str, graph: dict[str, set[str]], targets: frozenset[str] | set[str]) -> bool:
    """Whether a function reachable from ``kernel`` (itself included) names one of ``targets``."""
    seen, todo = {kernel}, [kernel]
    while todo:
        names = graph.get(todo.pop(), set())
        if names & targets:
            return True
        for name in names:
            if name in graph and name not in seen and name not in targets:
                seen.add(name)
                todo.append(name)
    return False


class Analysis:
    """What the analysis preprocessing found: kernels, signatures, dynamic arrays, the call graph."""

    def __init__(self, text: str, cxx: bool) -> None:
        self.text = text
        self.failure = ""  # why the source's declarations could not be read (GPU builds go on from the binary)
        try:
            self.info = _declarations.analyse(text, cxx=cxx)
        except _declarations.SignatureError as exc:
            self.info, self.failure = _declarations.SourceInfo(is_cxx=cxx), str(exc)
        self.graph = call_graph(text)
        self.extern_locals = _declarations.extern_local_arrays(text)
        self.signatures: dict[str, tuple[Any, ...] | None] = {}
        self.problems: dict[str, str] = {}
        for kernel in self.info.kernels:
            try:
                self.signatures[kernel.name] = _signature.signature(kernel, self.info)
            except _declarations.SignatureError as exc:
                self.signatures[kernel.name] = None
                self.problems[kernel.name] = str(exc)


def analyse(clang: _clang.Tool, work: Path, source: str, options: list[str], language: str) -> Analysis:
    """Preprocess ``source`` (written to ``work``) for the analysis and read it; ``COMPILE_FAILURE``
    when the preprocessor refuses it."""
    path = work / SOURCE_NAME[language]
    path.write_text(source)
    out = work / "analysis.i"
    _clang.run([clang.path, "-E", "-x", language, "-D__OFFLOADRT_ANALYSIS__", f"-I{GPU_INCLUDE}", f"-I{INCLUDE}",
                *options, str(path), "-o", str(out), "-MD", "-MF", str(work / "analysis.d")],
               "preprocessing the portable source")
    return Analysis(out.read_text(errors="replace"), language == "c++")


def build_depends(work: Path) -> list[str]:
    """A build's ``-MD`` options: what it read goes to ``build.d`` (for the cache; the analysis writes
    ``analysis.d``)."""
    return ["-MD", "-MF", str(work / "build.d")]



# Reading clang's JSON syntax tree (``-Xclang -ast-dump=json``), for the host's work-group regions.

class AstError(Exception):
    """A node the reader cannot place (a location inside a macro expansion)."""


def children(node: Node) -> list[Node]:
    return [child for child in node.get("inner", ()) if child]


def walk(node: Node) -> Iterator[Node]:
    """``node`` and every node under it, depth first in source order (no recursion: trees can be deep)."""
    todo = [node]
    while todo:
        item = todo.pop()
        yield item
        todo += reversed(children(item))


def begin(node: Node) -> int:
    where = node["range"]["begin"]
    if "offset" not in where:
        raise AstError("a statement comes from a macro expansion")
    return int(where["offset"])


def end(node: Node) -> int:
    where = node["range"]["end"]
    if "offset" not in where:
        raise AstError("a statement comes from a macro expansion")
    return int(where["offset"]) + int(where.get("tokLen", 0))


def kernel_definitions(ast: Node, names: set[str]) -> dict[str, Node]:
    """The definitions (with a body) of the named functions at file scope (or in ``extern "C"``)."""
    found: dict[str, Node] = {}
    todo = list(children(ast))
    while todo:
        node = todo.pop()
        if node.get("kind") == "LinkageSpecDecl":
            todo += children(node)
        elif node.get("kind") == "FunctionDecl" and node.get("name") in names and any(
                child.get("kind") == "CompoundStmt" for child in children(node)):
            found[node["name"]] = node
    return found


def callee(node: Node) -> str | None:
    """The name of the function a CallExpr calls directly, else None."""
    inner = children(node)
    target = inner[0] if inner else {}
    while target.get("kind") in ("ImplicitCastExpr", "ParenExpr"):
        target = (children(target) or [{}])[0]
    if target.get("kind") == "DeclRefExpr" and target.get("referencedDecl", {}).get("kind") == "FunctionDecl":
        return str(target["referencedDecl"]["name"])
    return None


def stored_variable(node: Node) -> str | None:
    """The variable a written lvalue expression stores into (its own storage, not through a pointer)."""
    while True:
        kind = node.get("kind")
        if kind == "DeclRefExpr":
            return str(node["referencedDecl"]["id"])
        if kind in ("ParenExpr", "ExtVectorElementExpr") or (kind == "MemberExpr" and not node.get("isArrow")) or (
                kind == "ImplicitCastExpr" and node.get("castKind") in ("ArrayToPointerDecay", "NoOp")) or (
                kind == "UnaryOperator" and node.get("opcode") in ("__extension__", "__real", "__imag")):
            node = (children(node) or [{}])[0]
        elif kind == "ArraySubscriptExpr":
            inner = children(node)
            roots = [stored_variable(child) for child in inner]
            return next((root for root in roots if root), None)
        else:
            return None


def written(node: Node) -> dict[str, list[int]]:
    """Variable id -> offsets of the assignments, increments or address-takings of it under ``node``
    (an address taken is a write that may come later: ``&x``, ``&s.f``, ``__builtin_addressof(x)``,
    and an array or array member decaying to a pointer)."""
    found: dict[str, list[int]] = {}
    for item in walk(node):
        kind, target = item.get("kind"), None
        if (kind == "BinaryOperator" and item.get("opcode") == "=") or kind == "CompoundAssignOperator":
            target = children(item)[0]
        elif kind == "UnaryOperator" and item.get("opcode") in ("++", "--", "&"):
            target = children(item)[0]
        root = stored_variable(target) if target else None
        if root:
            found.setdefault(root, []).append(begin(item))
    for root, at in escapes(node):
        found.setdefault(root, []).append(at)
    return found


def escapes(node: Node) -> list[tuple[str, int]]:
    """(variable id, offset) of each place under ``node`` where a pointer into a variable's own storage
    is made: ``&`` of it or of a member or element of it, ``__builtin_addressof``, and an array (or an
    array member) decaying to a pointer."""
    found: list[tuple[str, int]] = []
    for item in walk(node):
        kind, target = item.get("kind"), None
        if kind == "UnaryOperator" and item.get("opcode") == "&":
            target = (children(item) or [{}])[0]
        elif kind == "CallExpr" and callee(item) == "__builtin_addressof" and len(children(item)) > 1:
            target = children(item)[1]
        elif kind == "ImplicitCastExpr" and item.get("castKind") == "ArrayToPointerDecay":
            target = (children(item) or [{}])[0]
        root = stored_variable(target) if target else None
        if root:
            found.append((root, begin(item)))
    return found
