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
    escapes,
    kernel_definitions,
    reaches,
    stored_variable,
    walk,
    written,
)
from ._regions_checks import _WRAPPER_MARK, _indirect_callers, _slot_type_ok, _user_aliases, _user_pragma

BARRIER = "__gpu_sync_threads"
UNIFORM_CALLS = frozenset({
    "__gpu_num_threads_x", "__gpu_num_threads_y", "__gpu_num_threads_z", "__gpu_num_threads",
    "__gpu_num_blocks_x", "__gpu_num_blocks_y", "__gpu_num_blocks_z", "__gpu_num_blocks",
    "__gpu_block_id_x", "__gpu_block_id_y", "__gpu_block_id_z", "__gpu_block_id", "__gpu_num_lanes"})
_BANNED = frozenset({"GotoStmt", "IndirectGotoStmt", "LabelStmt", "AddrLabelExpr", "LambdaExpr", "CXXTryStmt",
                     "CXXThrowExpr", "CoroutineBodyStmt", "CoreturnStmt", "BlockExpr", "SEHTryStmt",
                     "GCCAsmStmt", "MSAsmStmt",  # asm outputs are writes the analysis cannot see
                     "CompoundLiteralExpr",  # its storage ends with its region's block
                     "PredefinedExpr", "SourceLocExpr",  # __func__, __builtin_LINE(): the copy is elsewhere
                     "GenericSelectionExpr", "ChooseExpr"})  # lvalues the write analysis does not follow
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
        if re.search(r"float|double|_Complex", str(item.get("type", {}).get("qualType", ""))):
            raise IneligibleError("a barrier loop's header computes in floating point (items may change "
                                  "the rounding mode)")
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


def plan(function: Node, text: str, graph: dict[str, set[str]], cxx: bool,
         indirect: frozenset[str] = frozenset()) -> Plan:
    """The regions of one kernel definition, or ``IneligibleError`` with the reason it runs as fibers."""
    if cxx:  # references, overloads, methods, constructors and implicit calls are not analysed
        raise IneligibleError("C++ kernels run as fibers")
    inner = children(function)
    params = [node for node in inner if node.get("kind") == "ParmVarDecl"]
    body = next(node for node in inner if node.get("kind") == "CompoundStmt")
    nodes = list(walk(body))
    for node in nodes:
        if node.get("kind") in _BANNED:
            raise IneligibleError(f"the kernel has a {node['kind']}")
        if node.get("kind") == "ReturnStmt" and children(node):
            raise IneligibleError("the kernel returns a value")
        if node.get("kind") == "CallExpr" and callee(node) is None:
            raise IneligibleError("the kernel calls a function through a pointer")
        if node.get("kind") == "CallExpr" and str(callee(node)).startswith(("__builtin_alloca", "alloca")):
            raise IneligibleError("the kernel allocates on the stack (every item's allocation would live on one "
                                  "stack until the group ends)")
    head = text[begin(function):begin(body)].replace('__attribute__((visibility("hidden")))', "")
    if "__attribute__" in head or "[[" in head or "__declspec" in head:
        raise IneligibleError("the kernel has attributes of its own (the region copy would not have them)")
    if _user_aliases(text):  # a function known by another name: the call graph would not see its barriers
        raise IneligibleError("the source declares a function alias or an asm label")
    if _user_pragma(text):  # the copy is compiled elsewhere, under another pragma state
        raise IneligibleError("the source has a pragma (the region code would be compiled under another one)")
    if "__OL_NEXT__" in text[begin(body):end(body)]:
        raise IneligibleError("the kernel's body has offloadrt's own label placeholder")
    calls = {str(node["referencedDecl"]["name"]) for node in nodes if node.get("kind") == "DeclRefExpr"
             and node["referencedDecl"].get("kind") == "FunctionDecl"}
    for name in calls - {BARRIER}:
        if name in FIBER_CALLS or reaches(name, graph, FIBER_CALLS):
            raise IneligibleError(f"the kernel reaches a barrier or lane operation through {name!r}")
        if name in indirect or reaches(name, graph, indirect):  # a pointer could lead to a barrier
            raise IneligibleError(f"the kernel reaches a call through a function pointer through {name!r}")
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
    if result.returns and any(not isinstance(part, Region) for part in parts):
        # a loop header (or its uniform declaration) runs once per group: with every item finished
        # it would still run (a division by zero, or a long loop of nothing), where fibers stop
        raise IneligibleError("the kernel returns early and has a barrier loop")
    _locals(result, body, planner.uniform, cxx, text)
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


def _locals(result: Plan, body: Node, uniform_ids: set[str], cxx: bool, text: str) -> None:
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
    escaping = _address_taken(body)
    for ident, decl in decls.items():  # a pointer to it may reach a later region: its storage must last
        if ident not in uniform_ids and (ident in escaping or "[" in str(decl.get("type", {}).get("qualType", ""))):
            result.per_item[ident] = decl
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
        if value and (decl.get("init") != "c" or "[" in qual or value[0].get("kind") in (
                "InitListExpr", "CXXConstructExpr", "ParenListExpr", "StringLiteral")):
            raise IneligibleError(f"the local {decl['name']!r} kept across a barrier has an initializer list")
        if re.search(r"typeof|decltype|_Atomic", qual) or re.search(r"_Alignas|alignas|__attribute__",
                                                                   text[begin(decl):end(decl)]):
            raise IneligibleError(f"the local {decl['name']!r} kept across a barrier has a type or alignment "
                                  "its slot cannot copy")
        why = _slot_type_ok(decl)
        if why:
            raise IneligibleError(f"the local {decl['name']!r} kept across a barrier has {why}")
    for region in regions_of(result.parts):
        for stmt in region.stmts:
            declared = _var_decls(stmt)
            if len(declared) > 1 and any(str(decl["id"]) in result.per_item for decl in declared) and re.search(
                    r"__attribute__|_Alignas|\bconst\b|\bvolatile\b|_Atomic|\bregister\b", text[begin(stmt):end(stmt)]):
                raise IneligibleError("a declaration of a local kept across a barrier declares others with "
                                      "qualifiers or attributes")
    _named_only_where_rewritten(result, body, text, decls)


def _address_taken(body: Node) -> set[str]:
    """The VarDecl ids of the variables a pointer into which the body makes (see ``escapes``)."""
    return {root for root, _ in escapes(body)}


_BODY_WORDS = re.compile(r"\b(?:typedef|enum|struct|union)\b[^;{()]*\{|\bcleanup\b|\b_Thread_local\b")


def _named_only_where_rewritten(result: Plan, body: Node, text: str, decls: dict[str, Node]) -> None:
    """Regions move code: a per-item local's declaration goes away (each reference becomes its slot),
    statics go to the top, a loop's header and uniform declaration go outside the regions, and each
    region is a block of its own. So the name of a top-level local must appear nowhere but where the
    tree shows a reference to it or its declaration (not inside a type, a ``sizeof`` of a type, an
    array bound, where it could name something else afterwards), and the body declares no tag or
    type (its scope would end with its region) and no ``cleanup`` (it would run at the region's end)."""
    start, stop = begin(body), end(body)
    words = _BODY_WORDS.search(text, start, stop)
    if words:
        raise IneligibleError(f"the kernel's body has {words.group().split()[0]!r} (a declaration a region "
                              "would scope differently)")
    tracked = dict(decls)
    for stmt in result.statics:
        tracked.update({str(decl["id"]): decl for decl in _var_decls(stmt)})
    names = {str(decl["name"]) for decl in tracked.values()}
    if not names:
        return
    local_names = {str(decl["name"]) for decl in decls.values()}
    for stmt in result.statics:  # moved to the top: a local it names would be out of scope there
        used = set(re.findall(r"[A-Za-z_]\w*", text[begin(stmt):end(stmt)])) & local_names
        if used:
            raise IneligibleError(f"a static local's declaration names the local {sorted(used)[0]!r}")
    allowed = {begin(node) for node in walk(body) if node.get("kind") == "DeclRefExpr"
               and str(node["referencedDecl"]["id"]) in tracked}
    allowed |= {int(decl.get("loc", {}).get("offset", -1)) for decl in tracked.values()}
    for match in re.finditer(r"[A-Za-z_]\w*", text[start:stop]):
        if match.group() not in names or start + match.start() in allowed:
            continue
        before = text[start:start + match.start()].rstrip()
        if before.endswith(".") or before.endswith("->"):
            continue  # a member of that name
        raise IneligibleError(f"the local {match.group()!r} is named where moving the regions' code could "
                              "change what it names")







def rewrite(text: str, ast: Node, kernels: dict[str, int], graph: dict[str, set[str]],
            cxx: bool) -> tuple[str, dict[str, str]]:
    """The preprocessed translation unit with the eligible kernels of ``kernels`` (name -> number of
    parameters; all run as fibers in ``text``) run as regions instead, and for each kernel
    ``"regions"`` or why it stays on fibers."""
    from ._regions_code import generate  # (it imports this module's types)

    mark = _WRAPPER_MARK.search(text)
    found = kernel_definitions(ast, set(kernels))
    paths: dict[str, str] = {}
    indirect = _indirect_callers(ast)
    functions: list[str] = []
    tail = text[mark.start():] if mark else ""
    for name, count in kernels.items():
        call = f"__ol_gpu_run_fibers(__ol_item_{name}, {'&' if count else ''}__a)"
        try:
            if mark is None or tail.count(call) != 1 or name not in found:
                raise IneligibleError("the kernel's definition or its wrapper was not found")
            function = found[name]
            if any(name in callees for caller, callees in graph.items() if caller != name):
                raise IneligibleError("another function of the source calls the kernel (its statics and the "
                                      "region copy's would be two)")
            result = plan(function, text, graph, cxx, indirect)
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
