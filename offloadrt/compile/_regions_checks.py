"""Checks of the work-group region path (see :mod:`._regions`) that look past one kernel's body: the
translation unit's pragmas and indirect calls, and whether a local's type can be its per-item slot's."""

from __future__ import annotations

import re

from ._analysis import Node, callee, children, walk

_WRAPPER_MARK = re.compile(r'^#(?:line)? 1 "<offloadrt host wrapper>".*$', re.MULTILINE)


def _slot_type_ok(decl: Node) -> str:
    """Why a per-item local's type cannot be its slot's (empty when it can): qualifiers the slot drops,
    or an alignment its stride would not keep (a typedef with an alignment attribute)."""
    kind = decl.get("type", {})
    qual = str(kind.get("qualType", ""))
    top = qual.rsplit("*", 1)[-1] if "*" in qual and "[" not in qual else qual
    if re.search(r"\b(?:const|volatile|_Atomic)\b", top):
        return "a const, volatile or atomic type"
    base = re.sub(r"\[\d*\]|\*|\b(?:const|volatile|restrict|struct|union|enum)\b", " ", qual).split()
    if kind.get("typeAliasDeclId") and "*" not in qual and not all(word in _STANDARD_NAMES for word in base):
        return f"a typedef ({qual}) that may carry an alignment"
    return ""


_STANDARD_NAMES = frozenset({"char", "short", "int", "long", "signed", "unsigned", "float", "double", "_Bool", "bool",
                             "size_t", "ptrdiff_t", "intptr_t", "uintptr_t", "_Float16", "__bf16", "__int128",
                             *(f"{sign}int{bits}_t" for sign in ("", "u") for bits in (8, 16, 32, 64))})


_OWN_PRAGMAS = re.compile(r'^\s*#\s*pragma\s+(?:redefine_extname\s+\w+\s+__ol_kernel_\w+|'
                          r'clang\s+diagnostic\s+ignored\s+"-Wpragmas")\s*$')


def _user_pragma(text: str) -> bool:
    """Whether the translation unit has a pragma of the user's (offloadrt's own come first, and its
    wrapper after the mark)."""
    mark = _WRAPPER_MARK.search(text)
    user = text[:mark.start()] if mark else text
    if "_Pragma" in user:
        return True
    return any("pragma" in line and line.lstrip().startswith("#") and not _OWN_PRAGMAS.match(line)
               for line in user.splitlines() if "pragma" in line)


def _indirect_callers(ast: Node) -> frozenset[str]:
    """The functions of the translation unit whose bodies call through a function pointer."""
    found: set[str] = set()
    for node in children(ast):
        if node.get("kind") != "FunctionDecl" or not node.get("name"):
            continue
        if any(inner.get("kind") == "CallExpr" and callee(inner) is None for inner in walk(node)):
            found.add(str(node["name"]))
    return frozenset(found)


_ALIASES = re.compile(r'\b(?:alias|ifunc)\s*\(|\)\s*(?:__asm__|__asm|asm)\s*\(\s*"[^"]*"\s*\)\s*[;{]')


def _user_aliases(text: str) -> bool:
    """Whether the user's part of the translation unit names a function by an alias, an ifunc or an
    asm label (a call under one name may run code the call graph knows under another)."""
    mark = _WRAPPER_MARK.search(text)
    return bool(_ALIASES.search(text[:mark.start()] if mark else text))
