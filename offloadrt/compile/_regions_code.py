"""The code of a kernel run as work-group regions (see :mod:`._regions`): per-item locals moved to
their slots, returns finishing the item, and each region a loop over the group's items."""

from __future__ import annotations

from ._analysis import Node, begin, children, end, walk
from ._regions import Loop, Plan, Region, Uniform, _var_decls, regions_of


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
    # The group's floating-point environment is its own, as on the fiber path: restored when it ends.
    outer += ["#if defined(__x86_64__)",
              "  const unsigned __ol_mxcsr = __builtin_ia32_stmxcsr();",
              "  unsigned short __ol_fpucw;",
              '  __asm__ volatile("fnstcw %0" : "=m"(__ol_fpucw));',
              "#elif defined(__aarch64__)",
              "  unsigned long __ol_fpcr;",
              '  __asm__ volatile("mrs %0, fpcr" : "=r"(__ol_fpcr));',
              "#endif",
              f"  __ol_regions_body_{result.name}({call});",
              "#if defined(__x86_64__)",
              "  __builtin_ia32_ldmxcsr(__ol_mxcsr);",
              '  __asm__ volatile("fldcw %0" : : "m"(__ol_fpucw));',
              "#elif defined(__aarch64__)",
              '  __asm__ volatile("msr fpcr, %0" : : "r"(__ol_fpcr));',
              "#endif",
              "}"]
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
