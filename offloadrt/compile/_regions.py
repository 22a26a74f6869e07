"""Work-group regions: a barrier kernel of a simple shape compiled into loops over its work-items
between its barriers, instead of one fiber per item (docs/portable-kernels.md).

Read from clang's own AST (``-ast-dump=json``) of the preprocessed translation unit the host build
compiles. A kernel takes this path when every ``__gpu_sync_threads`` it reaches is a direct call that
is a top-level statement of its body, or of the body of a ``for`` loop that is itself a top-level
statement of the body (a barrier loop), and:

- a barrier loop's header is uniform within the group: its induction variable (declared in the
  header, or just before the loop at top level) is written only by the header, and the header reads
  only literals, that variable, parameters the kernel never writes, enumerators and
  ``__gpu_num_threads*``/``__gpu_num_blocks*``/``__gpu_block_id*``/``__gpu_num_lanes``; its body
  has no ``break``/``continue`` that leaves it;
- the kernel writes none of its parameters, reaches no lane operation, ``__gpu_exit``,
  ``__gpu_thread_suspend``, no function that reaches one of those or a barrier, and has no
  ``goto``/label, lambda or ``try``;
- a top-level local used in more than one region (it becomes per-item storage) has a type that can
  be named (no variably modified or unnamed type; in C++ a scalar, pointer or array of them) and no
  initializer list or constructor; top-level declarations are variables only.

Each region becomes a loop over the group's items (x fastest, then y, z) running its statements; a
per-item local lives in per-thread scratch memory indexed by the item; a ``return`` marks the item
finished, so it skips its later regions (a finished item counts as arrived, as with fibers).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from ._analysis import (
    FIBER_CALLS,
    AstError,
    Node,
    begin,
    callee,
    children,
    end,
    kernel_definitions,
    reaches,
    stored_variable,
    walk,
    written,
)

BARRIER = "__gpu_sync_threads"
UNIFORM_CALLS = frozenset({
    "__gpu_num_threads_x", "__gpu_num_threads_y", "__gpu_num_threads_z", "__gpu_num_threads",
    "__gpu_num_blocks_x", "__gpu_num_blocks_y", "__gpu_num_blocks_z", "__gpu_num_blocks",
    "__gpu_block_id_x", "__gpu_block_id_y", "__gpu_block_id_z", "__gpu_block_id", "__gpu_num_lanes"})
_BANNED = frozenset({"GotoStmt", "IndirectGotoStmt", "LabelStmt", "AddrLabelExpr", "LambdaExpr", "CXXTryStmt",
                     "CXXThrowExpr", "CoroutineBodyStmt", "CoreturnStmt", "BlockExpr", "SEHTryStmt"})
_UNIFORM_KINDS = frozenset({"IntegerLiteral", "CharacterLiteral", "FloatingLiteral", "CXXBoolLiteralExpr",
                            "ImplicitCastExpr", "CStyleCastExpr", "CXXStaticCastExpr", "CXXFunctionalCastExpr",
                            "ParenExpr", "BinaryOperator", "CompoundAssignOperator", "UnaryOperator",
                            "ConditionalOperator", "UnaryExprOrTypeTraitExpr", "ConstantExpr", "DeclRefExpr",
                            "CallExpr"})
_LOOPS = ("ForStmt", "WhileStmt", "DoStmt", "CXXForRangeStmt")
_PLAIN_CXX_TYPE = re.compile(r"^(?:(?:const|volatile|signed|unsigned|short|long|int|char|char8_t|char16_t|"
                             r"char32_t|wchar_t|bool|float|double|_Float16|__bf16|__int128|void|u?int(?:8|16|32|64)_t|size_t|"
                             r"ptrdiff_t|u?intptr_t)\b|[*\s]|"
                             r"\[\d+\])+$")


class IneligibleError(AstError):
    """Why a kernel runs as fibers instead."""


@dataclass
class Region:
    stmts: list[Node]
    next_start: int  # where the text after the last statement ends (the next statement or the `}`)


@dataclass
class Loop:
    node: Node
    body: list[Region | Loop | Uniform]


@dataclass
class Uniform:
    stmt: Node  # a top-level declaration of a barrier loop's induction variable: run once per group


@dataclass
class Plan:
    """How one kernel runs as regions."""
    name: str
    params: str
    names: list[str]
    parts: list[Region | Loop | Uniform]
    per_item: dict[str, Node] = field(default_factory=dict)  # VarDecl id -> VarDecl
    statics: list[Node] = field(default_factory=list)
    returns: bool = False


def _is_barrier(node: Node) -> bool:
    return node.get("kind") == "CallExpr" and callee(node) == BARRIER and len(children(node)) == 1


def _uniform(node: Node, allowed: set[str], induction: str | None) -> None:
    for item in walk(node):
        kind = item.get("kind")
        if kind not in _UNIFORM_KINDS:
            raise IneligibleError(f"a barrier loop's header uses {kind}")
        if kind == "UnaryExprOrTypeTraitExpr":
            continue
        if kind == "UnaryOperator" and item.get("opcode") == "*":
            raise IneligibleError("a barrier loop's header reads memory, which items may write")
        if kind == "CallExpr" and callee(item) not in UNIFORM_CALLS:
            raise IneligibleError("a barrier loop's header calls a function that may differ between items")
        if kind in ("BinaryOperator", "CompoundAssignOperator", "UnaryOperator") and (
                item.get("opcode") in ("=", "++", "--", "&") or kind == "CompoundAssignOperator"):
            if item.get("opcode") == "&" or stored_variable(children(item)[0]) != induction:
                raise IneligibleError("a barrier loop's header writes something other than its induction variable")
        if kind == "DeclRefExpr":
            decl = item["referencedDecl"]
            if decl.get("kind") not in ("EnumConstantDecl", "FunctionDecl") and decl["id"] not in allowed:
                raise IneligibleError(f"a barrier loop's header reads {decl.get('name')!r}, which may differ "
                                 "between items")


def _no_escape(body: Node) -> None:
    """No break/continue in a barrier loop's body leaves the loop (per item, it would not be uniform)."""
    def visit(node: Node, in_loop: bool, in_switch: bool) -> None:
        kind = node.get("kind")
        if (kind == "BreakStmt" and not (in_loop or in_switch)) or (kind == "ContinueStmt" and not in_loop):
            raise IneligibleError("a barrier loop's body leaves the loop with break or continue")
        for child in children(node):
            visit(child, in_loop or kind in _LOOPS, in_switch or kind == "SwitchStmt")
    for child in children(body):
        visit(child, False, False)


def _var_decls(stmt: Node) -> list[Node]:
    if stmt.get("kind") != "DeclStmt":
        return []
    decls = children(stmt)
    if any(decl.get("kind") != "VarDecl" for decl in decls):
        raise IneligibleError("a top-level declaration declares a type")
    return decls


def plan(function: Node, text: str, graph: dict[str, set[str]], cxx: bool) -> Plan:
    """The regions of one kernel definition, or ``IneligibleError`` with the reason it runs as fibers."""
    inner = children(function)
    params = [node for node in inner if node.get("kind") == "ParmVarDecl"]
    body = next(node for node in inner if node.get("kind") == "CompoundStmt")
    nodes = list(walk(body))
    for node in nodes:
        if node.get("kind") in _BANNED:
            raise IneligibleError(f"the kernel has a {node['kind']}")
        if node.get("kind") == "ReturnStmt" and children(node):
            raise IneligibleError("the kernel returns a value")
    calls = {str(node["referencedDecl"]["name"]) for node in nodes if node.get("kind") == "DeclRefExpr"
             and node["referencedDecl"].get("kind") == "FunctionDecl"}
    for name in calls - {BARRIER}:
        if name in FIBER_CALLS or reaches(name, graph, FIBER_CALLS):
            raise IneligibleError(f"the kernel reaches a barrier or lane operation through {name!r}")
    if {str(param["id"]) for param in params} & set(written(body)):
        raise IneligibleError("the kernel writes one of its parameters (each item has its own copy)")
    planner = _Planner(body, {str(param["id"]) for param in params}, written(body))
    parts = planner.split(children(body), int(body["range"]["end"]["offset"]), True)
    if planner.barriers != sum(1 for node in nodes if node.get("kind") == "DeclRefExpr"
                               and node["referencedDecl"].get("name") == BARRIER):
        raise IneligibleError("a barrier is not a top-level statement of the kernel or of a barrier loop's body")
    if not planner.barriers:
        raise IneligibleError("the kernel has no barrier of its own")
    if any(not param.get("name") for param in params):
        raise IneligibleError("a parameter has no name")
    result = Plan(function["name"], text[begin(params[0]):end(params[-1])] if params else "void",
                  [str(param["name"]) for param in params], parts,
                  returns=any(node.get("kind") == "ReturnStmt" for node in nodes))
    _locals(result, body, planner.uniform, cxx)
    return result


class _Planner:
    """Splits statement lists at their barriers (and at barrier loops, one level deep)."""

    def __init__(self, body: Node, params: set[str], writes: dict[str, list[int]]) -> None:
        self.body, self.params, self.writes = body, params, writes
        self.barriers = 0
        self.uniform: set[str] = set()  # the induction variables declared before their loops

    def split(self, statements: list[Node], stop: int, top: bool) -> list[Region | Loop | Uniform]:
        out: list[Region | Loop | Uniform] = []
        current: list[Node] = []
        for index, stmt in enumerate(statements):
            barrier_loop = top and stmt.get("kind") == "ForStmt" and _has_barrier(stmt)
            if _is_barrier(stmt) or barrier_loop:
                previous = statements[index - 1] if index else {}
                loop, declared = self.loop(stmt, previous) if barrier_loop else (None, None)
                if declared is not None:  # runs once per group, before the loop
                    current.pop()
                if current:
                    out.append(Region(current, begin(declared or stmt)))
                out += [Uniform(declared)] if declared is not None else []
                out += [loop] if loop is not None else []
                self.barriers += not barrier_loop
                current = []
            else:
                current.append(stmt)
        if current:
            out.append(Region(current, stop))
        return out

    def loop(self, stmt: Node, previous: Node) -> tuple[Loop, Node | None]:
        init, _, cond, inc, loop_body = (stmt.get("inner") or [None] * 5)[:5]
        if not init or not cond or not inc or not loop_body or loop_body.get("kind") != "CompoundStmt":
            raise IneligibleError("a barrier loop needs an initialisation, a condition, an increment and a { body }")
        declared = None
        if init.get("kind") == "DeclStmt":
            decls = children(init)
            if len(decls) != 1 or decls[0].get("kind") != "VarDecl" or decls[0].get("storageClass"):
                raise IneligibleError("a barrier loop declares something other than one induction variable")
            induction = str(decls[0]["id"])
            for value in children(decls[0]):
                _uniform(value, self.params, None)
        elif init.get("kind") == "BinaryOperator" and init.get("opcode") == "=":
            induction = stored_variable(children(init)[0]) or ""
            decls = _var_decls(previous) if previous else []
            if len(decls) != 1 or str(decls[0]["id"]) != induction or decls[0].get("storageClass"):
                raise IneligibleError("a barrier loop's induction variable is not declared just before the loop")
            for value in children(decls[0]):
                _uniform(value, self.params, None)
            _uniform(children(init)[1], self.params | {induction}, induction)
            declared = previous
            self.uniform.add(induction)
        else:
            raise IneligibleError("a barrier loop's initialisation is not a declaration or an assignment")
        if "&" in str(_find_decl(self.body, induction).get("type", {}).get("qualType", "")):
            raise IneligibleError("a barrier loop's induction variable is a reference")
        if any(not begin(stmt) <= at < begin(loop_body) for at in self.writes.get(induction, [])):
            raise IneligibleError("a barrier loop's induction variable is written in the loop's body or elsewhere")
        _uniform(cond, self.params | {induction}, induction)
        _uniform(inc, self.params | {induction}, induction)
        _no_escape(loop_body)
        return Loop(stmt, self.split(children(loop_body), int(loop_body["range"]["end"]["offset"]), False)), declared


def _has_barrier(loop_stmt: Node) -> bool:
    body = (loop_stmt.get("inner") or [None] * 5)[4]
    return bool(body) and any(_is_barrier(stmt) for stmt in children(body))


def _find_decl(body: Node, decl_id: str) -> Node:
    return next((node for node in walk(body) if node.get("kind") == "VarDecl" and str(node["id"]) == decl_id), {})


def regions_of(parts: list[Region | Loop | Uniform]) -> Iterator[Region]:
    for part in parts:
        if isinstance(part, Region):
            yield part
        elif isinstance(part, Loop):
            yield from regions_of(list(part.body))


def _locals(result: Plan, body: Node, uniform_ids: set[str], cxx: bool) -> None:
    """Which top-level locals are per item (used in more than one region), which are hoisted statics."""
    home: dict[str, int] = {}  # VarDecl id -> its region
    decls: dict[str, Node] = {}
    spans: list[tuple[int, int, int]] = []
    for number, region in enumerate(regions_of(result.parts)):
        spans.append((begin(region.stmts[0]), region.next_start, number))
        for stmt in region.stmts:
            for decl in _var_decls(stmt):
                if decl.get("storageClass") in ("static", "extern"):
                    if cxx and children(decl):
                        raise IneligibleError("a static local with an initializer in C++")
                    result.statics.append(stmt)
                else:
                    home[str(decl["id"])] = number
                    decls[str(decl["id"])] = decl
    static_names = {decl["name"]: str(decl["id"]) for stmt in result.statics for decl in _var_decls(stmt)}
    if set(static_names) & set(result.names):
        raise IneligibleError("a static local hides a parameter")
    for node in walk(body):
        if node.get("kind") != "DeclRefExpr":
            continue
        decl = node["referencedDecl"]
        if decl.get("name") in static_names and str(decl["id"]) != static_names[decl["name"]]:
            raise IneligibleError(f"the static local {decl['name']!r} hides another declaration")
        ident = str(decl["id"])
        if ident in home and ident not in uniform_ids:
            at = begin(node)
            where = next((number for start, stop, number in spans if start <= at < stop), -1)
            if where != home[ident]:
                result.per_item[ident] = decls[ident]
    for decl in result.per_item.values():
        qual = str(decl.get("type", {}).get("qualType", ""))
        plain = str(decl.get("type", {}).get("desugaredQualType", qual))
        if re.search(r"\[[^\]]*[^\d\]][^\]]*\]|\(unnamed|\(anonymous|\(lambda|&", qual):
            raise IneligibleError(f"the local {decl['name']!r} kept across a barrier has a type that cannot be named")
        if cxx and not _PLAIN_CXX_TYPE.match(plain):
            raise IneligibleError(f"the local {decl['name']!r} kept across a barrier is not a scalar, pointer or array")
        value = children(decl)
        if value and (decl.get("init") != "c" or value[0].get("kind") in ("InitListExpr", "CXXConstructExpr",
                                                                           "ParenListExpr")):
            raise IneligibleError(f"the local {decl['name']!r} kept across a barrier has an initializer list")


def _type(decl: Node, cxx: bool) -> str:
    qual = str(decl["type"]["qualType"])
    return f"__typeof__(__remove_cv({qual}))" if cxx else f"__typeof_unqual__({qual})"


def _edits(result: Plan, text: str, body: Node, cxx: bool) -> list[tuple[int, int, str]]:
    """(start, stop, replacement) over the kernel's text: per-item variables to their slots, returns
    to finishing the item (``__OL_NEXT__``: the region's label), statics out of the regions."""
    slots = {ident: f"(__ol_v{number}[__ol_i])" for number, ident in enumerate(result.per_item)}
    edits: list[tuple[int, int, str]] = []
    for node in walk(body):
        kind = node.get("kind")
        if kind == "DeclRefExpr" and str(node["referencedDecl"]["id"]) in slots:
            edits.append((begin(node), end(node), slots[str(node["referencedDecl"]["id"])]))
        elif kind == "ReturnStmt":
            edits.append((begin(node), begin(node) + 6,
                          "do { __ol_done[__ol_i] = 1; goto __OL_NEXT__; } while (0)"))
    for stmt in result.statics:
        edits.append((begin(stmt), end(stmt), ""))
    for region in regions_of(result.parts):
        for stmt in region.stmts:
            decls = _var_decls(stmt)
            if not any(str(decl["id"]) in slots for decl in decls):
                continue
            pieces = []
            for decl in decls:
                value = children(decl)
                init = _render(text, begin(value[0]), end(value[0]), edits) if value else ""
                if str(decl["id"]) in slots:
                    pieces.append(f"{slots[str(decl['id'])]} = ({init});" if value else "")
                else:
                    pieces.append(f"{_type(decl, cxx)} {decl['name']}{' = ' + init if value else ''};")
            edits.append((begin(stmt), end(stmt), " ".join(pieces)))
    return edits


def _render(text: str, start: int, stop: int, edits: list[tuple[int, int, str]]) -> str:
    """``text[start:stop]`` with the edits inside it (an edit inside another one is the outer one's)."""
    out, at = [], start
    for first, last, replacement in sorted(edits, key=lambda edit: (edit[0], -edit[1])):
        if first < at or first >= stop or last > stop:
            continue
        out += [text[at:first], replacement]
        at = last
    out.append(text[at:stop])
    return "".join(out)


_ITEMS = """  for (uint32_t __ol_z = 0; __ol_z < __ol_nz; ++__ol_z) {
    __ol_gpu.tid[2] = __ol_z;
    for (uint32_t __ol_y = 0; __ol_y < __ol_ny; ++__ol_y) {
      __ol_gpu.tid[1] = __ol_y;
      for (uint32_t __ol_x = 0; __ol_x < __ol_nx; ++__ol_x) {
        __ol_gpu.tid[0] = __ol_x;
        const size_t __ol_i = ((size_t)__ol_z * __ol_ny + __ol_y) * __ol_nx + __ol_x;
        (void)__ol_i;
"""


def generate(result: Plan, text: str, body: Node, cxx: bool) -> str:
    """The C/C++ function ``__ol_regions_<kernel>`` (same parameters as the kernel) that runs one
    work-group of the kernel as regions."""
    edits = _edits(result, text, body, cxx)
    types = [_type(decl, cxx) for decl in result.per_item.values()]
    # The storage reaches the regions as restrict parameters (clang honours restrict on parameters
    # only): stores to it do not make the compiler reload the item's ids or anything else.
    slots = [f"{kind} *__restrict __ol_v{number}" for number, kind in enumerate(types)]
    slots += ["unsigned char *__restrict __ol_done"] if result.returns else []
    params = ", ".join(([result.params] if result.names else []) + slots) or "void"
    out = [f"/* offloadrt: kernel {result.name} runs as work-group regions (no fibers) */",
           f"static __inline__ __attribute__((always_inline, unused)) void "
           f"__ol_regions_body_{result.name}({params}) {{"]
    out += [text[begin(stmt):end(stmt)] for stmt in result.statics]
    out += ["  const uint32_t __ol_nx = __ol_gpu.ntid[0], __ol_ny = __ol_gpu.ntid[1], __ol_nz = __ol_gpu.ntid[2];"]
    call = ", ".join(result.names + [f"__ol_v{number}" for number in range(len(types))]
                     + (["__ol_done"] if result.returns else []))
    outer = [f"static __attribute__((noinline, unused)) void __ol_regions_{result.name}({result.params}) {{",
             "  const size_t __ol_n = (size_t)__ol_gpu.ntid[0] * __ol_gpu.ntid[1] * __ol_gpu.ntid[2];",
             "  size_t __ol_bytes = 0;", "  (void)__ol_n;", "  (void)__ol_bytes;"]
    outer += [f"  const size_t __ol_o{number} = __ol_gpu_region_slot(&__ol_bytes, __ol_n, sizeof({kind}), "
              f"__alignof__({kind}));" for number, kind in enumerate(types)]
    if result.returns:
        outer += ["  const size_t __ol_od = __ol_bytes;", "  __ol_bytes += __ol_n;"]
    if types or result.returns:
        outer.append("  unsigned char *__ol_s = __ol_gpu_region_scratch(__ol_bytes);")
    outer += [f"  {kind} *__ol_v{number} = ({kind} *)(void *)(__ol_s + __ol_o{number});"
              for number, kind in enumerate(types)]
    if result.returns:
        outer += ["  unsigned char *__ol_done = __ol_s + __ol_od;", "  __builtin_memset(__ol_done, 0, __ol_n);"]
    outer += [f"  __ol_regions_body_{result.name}({call});", "}"]
    labels = iter(range(1 << 30))

    def emit(parts: list[Region | Loop | Uniform]) -> None:
        for part in parts:
            if isinstance(part, Uniform):
                out.append(text[begin(part.stmt):end(part.stmt)])
            elif isinstance(part, Loop):
                loop_body = children(part.node)[-1]
                out.append(text[begin(part.node):begin(loop_body) + 1])
                emit(list(part.body))
                out.append("}")
            else:
                label = f"__ol_next_{next(labels)}"
                code = _render(text, begin(part.stmts[0]), part.next_start, edits).replace("__OL_NEXT__", label)
                out.append(_ITEMS + ("        if (__ol_done[__ol_i]) continue;\n" if result.returns else "")
                           + "        {\n" + code + "\n        }\n"
                           + (f"        {label}:;\n" if label in code else "") + "      }\n    }\n  }")
    emit(result.parts)
    out.append("}")
    return "\n".join(out + outer) + "\n"


_WRAPPER_MARK = re.compile(r'^#(?:line)? 1 "<offloadrt host wrapper>".*$', re.MULTILINE)


def rewrite(text: str, ast: Node, kernels: dict[str, int], graph: dict[str, set[str]],
            cxx: bool) -> tuple[str, dict[str, str]]:
    """The preprocessed translation unit with the eligible kernels of ``kernels`` (name -> number of
    parameters; all run as fibers in ``text``) run as regions instead, and for each kernel
    ``"regions"`` or why it stays on fibers."""
    mark = _WRAPPER_MARK.search(text)
    found = kernel_definitions(ast, set(kernels))
    paths: dict[str, str] = {}
    functions: list[str] = []
    tail = text[mark.start():] if mark else ""
    for name, count in kernels.items():
        call = f"__ol_gpu_run_fibers(__ol_item_{name}, {'&' if count else ''}__a)"
        try:
            if mark is None or tail.count(call) != 1 or name not in found:
                raise IneligibleError("the kernel's definition or its wrapper was not found")
            function = found[name]
            result = plan(function, text, graph, cxx)
            body = next(node for node in children(function) if node.get("kind") == "CompoundStmt")
            functions.append(generate(result, text, body, cxx))
        except (AstError, KeyError, IndexError, TypeError, ValueError, StopIteration, RecursionError) as why:
            # what this reader does not know (an unexpected tree) is not a failure: fibers run it
            paths[name] = f"fibers: {why}"
            continue
        arguments = ", ".join(f"__a.p{index}" for index in range(count))
        tail = tail.replace(call, f"(__ol_regions_{name}({arguments}), 0)")
        paths[name] = "regions"
    if not functions or mark is None:
        return text, paths
    head = text[:mark.start()]
    return f'{head}\n# 1 "<offloadrt work-group regions>"\n{"".join(functions)}{tail}', paths
