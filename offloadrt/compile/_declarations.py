"""C declarations in kernel sources: which kernels a source defines, their parameters, its structs and typedefs.

The parser reads the C-family declarations kernels use, not all of C++: a kernel is a function
marked ``__gpu_kernel`` (or what it expands to), ``__global__`` or ``OL_HOST_KERNEL``; each
parameter is a scalar, a pointer, or a struct by value whose definition is in the source. What it
cannot read raises :class:`SignatureError` (the kernel's signature is then unknown, never a guess).
:mod:`offloadrt.compile._signature` turns what it finds into ``Kernel.signature`` entries.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_COMMENT_OR_LITERAL = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.DOTALL)
_LINE_MARKER = re.compile(r"^[ \t]*#[^\n]*", re.MULTILINE)
_IDENT = re.compile(r"[A-Za-z_]\w*")
_TEMPLATE = re.compile(r"\btemplate\s*<(.*)>", re.DOTALL)  # in the text before a kernel's mark
KERNEL_MARK = "__ol_gpu_kernel__"
LOCAL_MARK = "__ol_gpu_local__"

# Attribute spellings that mark a kernel, after preprocessing or in raw CUDA/HIP source.
_KERNEL_ATTRIBUTES = re.compile(r"\b(nvptx_kernel|amdgpu_kernel|global|__global__|" + KERNEL_MARK + r")\b")
# Words of CUDA/HIP and of the host ABI that decorate a declaration without changing its type.
_DECORATIONS = re.compile(r"\b(?:__device__|__host__|__forceinline__|__noinline__|__inline__|inline|static|"
                          r"__launch_bounds__|__restrict__|__restrict|restrict|__declspec|constexpr|"
                          r"OL_HOST_EXPORT)\b")
_QUALIFIERS = {"const", "volatile", "__restrict__", "__restrict", "restrict", "struct", "class", "union", "enum",
               "typename", "register", "__unaligned"}

_FIXED = {"int8_t": "int8", "uint8_t": "uint8", "int16_t": "int16", "uint16_t": "uint16", "int32_t": "int32",
          "uint32_t": "uint32", "int64_t": "int64", "uint64_t": "uint64", "size_t": "uint64", "ssize_t": "int64",
          "ptrdiff_t": "int64", "intptr_t": "int64", "uintptr_t": "uint64", "bool": "bool", "_Bool": "bool",
          "float": "float32", "double": "float64", "_Float16": "float16", "__fp16": "float16",
          "int_fast8_t": "int8", "uint_fast8_t": "uint8", "int_least32_t": "int32", "uint_least32_t": "uint32",
          "int_least64_t": "int64", "uint_least64_t": "uint64", "int_least16_t": "int16",
          "uint_least16_t": "uint16", "int_least8_t": "int8", "uint_least8_t": "uint8"}


class SignatureError(ValueError):
    """A declaration the parser cannot read."""


@dataclass(frozen=True)
class Param:
    """One parameter: ``field`` declares it as a struct member named ``name`` (arrays decayed)."""

    name: str
    type_text: str
    field: str
    pointer: bool


@dataclass(frozen=True)
class KernelDecl:
    """A kernel defined in a source: its name, C++ linkage and parameters (None: unreadable);
    ``template`` is the template parameter list of a function template marked as a kernel
    (``"typename T"``), else ``""``."""

    name: str
    params: tuple[Param, ...] | None
    cxx_linkage: bool
    problem: str = ""
    template: str = ""


@dataclass
class SourceInfo:
    """What a source declares: kernels in order, struct layouts, scalar typedefs."""

    kernels: list[KernelDecl] = field(default_factory=list)
    structs: dict[str, list[tuple[str, str]] | None] = field(default_factory=dict)  # name -> [(field, type)]
    typedefs: dict[str, str] = field(default_factory=dict)
    is_cxx: bool = False


def clean(text: str) -> str:
    """``text`` without comments, preprocessor lines and literal contents (``"C"`` is kept)."""

    def literal(match: re.Match[str]) -> str:
        token = match.group(0)
        if token.startswith("/"):
            return " " if token.startswith("/*") else ""
        if token in ('"C"', '"C++"'):
            return token
        return '""' if token.startswith('"') else "' '"

    return _LINE_MARKER.sub("", _COMMENT_OR_LITERAL.sub(literal, text))


def _matching(text: str, start: int, open_char: str, close_char: str) -> int:
    """The index just past the bracket that closes the one at ``start``."""
    depth = 0
    for index in range(start, len(text)):
        char = text[index]
        if char == open_char:
            depth += 1
        elif char == close_char:
            depth -= 1
            if depth == 0:
                return index + 1
    raise SignatureError(f"unbalanced {open_char!r}")


def _normalise_attributes(text: str) -> str:
    """Replace ``__attribute__((...))``, ``__declspec(...)`` and ``[[...]]`` by a kernel mark when they
    name a kernel attribute, else by a space; ``__global__``/``__launch_bounds__(...)`` likewise."""
    out, index = [], 0
    pattern = re.compile(r"__attribute__\s*\(|__declspec\s*\(|__launch_bounds__\s*\(|alignas\s*\(|\[\[|"
                         r"\b__global__\b")
    while True:
        match = pattern.search(text, index)
        if match is None:
            out.append(text[index:])
            return "".join(out)
        out.append(text[index:match.start()])
        token = match.group(0)
        if token == "__global__":
            out.append(f" {KERNEL_MARK} ")
            index = match.end()
            continue
        if token == "[[":
            end = text.find("]]", match.end())
            if end < 0:
                raise SignatureError("unbalanced '[['")
            end += 2
        else:
            end = _matching(text, match.end() - 1, "(", ")")
        group = text[match.start():end]
        marked = token.startswith(("__attribute__", "[[")) and _KERNEL_ATTRIBUTES.search(group)
        out.append(f" {KERNEL_MARK} " if marked else " ")
        index = end


def scalar_dtype(type_text: str, typedefs: dict[str, str] | None = None) -> str | None:
    """The NumPy name of a C scalar type (``"unsigned int"`` -> ``"uint32"``), or None."""
    words = [w for w in _IDENT.findall(type_text) if w not in _QUALIFIERS and w != "std"]
    if not words:
        return None
    if len(words) == 1:
        word = words[0]
        if word in _FIXED:
            return _FIXED[word]
        if typedefs and word in typedefs:
            return scalar_dtype(typedefs[word], {k: v for k, v in typedefs.items() if k != word})
    known = {"unsigned", "signed", "char", "short", "int", "long"}
    if not set(words) <= known:
        return None
    unsigned = "unsigned" in words
    longs = words.count("long")
    if "char" in words:
        bits = 8
    elif "short" in words:
        bits = 16
    elif longs:
        bits = 64  # LP64 hosts and every GPU target
    else:
        bits = 32
    return f"{'u' if unsigned else ''}int{bits}"


def parse_param(text: str, index: int) -> Param:
    """One parameter declaration (attributes already removed) as a struct member ``p<index>``."""
    text = " ".join(text.split("=")[0].split())
    if not text or text == "...":
        raise SignatureError("variadic kernels are not supported")
    member = f"p{index}"
    if "(" in text:  # a function pointer: int (*fn)(int)
        match = re.search(r"\(\s*\*\s*(\w*)\s*\)", text)
        if match is None:
            raise SignatureError(f"cannot read parameter {text!r}")
        name = match.group(1)
        decl = text[:match.start()] + f"(*{member})" + text[match.end():]
        return Param(name, text, decl, True)
    if "&" in text:
        raise SignatureError(f"reference parameter {text!r}: kernels take values and pointers")
    array = re.search(r"\[[^\]]*\]\s*$", text)
    stem = text[:array.start()].rstrip() if array else text
    tokens = re.findall(r"[A-Za-z_]\w*|\*|::|<[^>]*>|\S", stem)
    name = ""
    if len(tokens) >= 2 and _IDENT.fullmatch(tokens[-1]) and tokens[-1] not in _QUALIFIERS | {
            "int", "char", "short", "long", "unsigned", "signed", "float", "double", "void", "bool", "_Bool"} \
            and tokens[-2] not in ("struct", "class", "union", "enum", "::", "typename"):
        name = tokens[-1]
        tokens = tokens[:-1]
    if array is not None:
        tokens.append("*")
    pointer = "*" in tokens
    if pointer:
        last = len(tokens) - 1 - tokens[::-1].index("*")
        head = [t for t in tokens[:last + 1]]
        tail = [t for t in tokens[last + 1:] if t not in _QUALIFIERS]  # const of the pointer itself
        tokens = head + tail
    else:
        tokens = [t for t in tokens if t not in ("const", "volatile")]
    type_text = _join(tokens)
    if not type_text:
        raise SignatureError(f"cannot read parameter {text!r}")
    return Param(name, type_text, f"{type_text} {member}", pointer)


def _join(tokens: list[str]) -> str:
    out = ""
    for token in tokens:
        if out and not (token in ("*", "::") or out.endswith(("*", "::")) or token.startswith("<")):
            out += " "
        out += token
    return out


def parse_params(text: str) -> tuple[Param, ...]:
    """The parameters of a declaration's parenthesised list (``()`` and ``(void)`` are none)."""
    inner = " ".join(text.split())
    if inner in ("", "void"):
        return ()
    parts, depth, start = [], 0, 0
    for index, char in enumerate(inner):
        if char in "(<[":
            depth += 1
        elif char in ")>]":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(inner[start:index])
            start = index + 1
    parts.append(inner[start:])
    return tuple(parse_param(part.strip(), index) for index, part in enumerate(parts))


def _extern_c_ranges(text: str) -> list[tuple[int, int]]:
    ranges = []
    for match in re.finditer(r'extern\s+"C"\s*\{', text):
        ranges.append((match.end() - 1, _matching(text, match.end() - 1, "{", "}")))
    return ranges


def analyse(text: str, *, cxx: bool) -> SourceInfo:
    """Kernels, structs and typedefs of a (preprocessed or raw) source."""
    body = _normalise_attributes(clean(text))
    info = types_of(body, SourceInfo(is_cxx=cxx))
    extern_c = _extern_c_ranges(body) if cxx else []
    seen: set[str] = set()
    for match in re.finditer(re.escape(KERNEL_MARK), body):
        head_end = _next_paren(body, match.end())
        if head_end is None:
            continue
        paren, head = head_end
        names = _IDENT.findall(head)
        if not names or "template" in head or "<" in head:
            continue
        name = names[-1]
        if name in seen or name in ("operator",):
            continue
        try:
            close = _matching(body, paren, "(", ")")
        except SignatureError:
            continue
        after = body[close:close + 200].lstrip()
        if not after.startswith("{") and not re.match(r"(?:noexcept|const|override|\s)*\{", after):
            continue  # a declaration; the definition comes elsewhere
        seen.add(name)
        prefix = _prefix(body, match.start())
        linkage_c = (not cxx) or 'extern "C"' in prefix or any(a <= match.start() < b for a, b in extern_c)
        template = _TEMPLATE.search(prefix)
        try:
            params: tuple[Param, ...] | None = parse_params(body[paren + 1:close - 1])
            problem = ""
        except SignatureError as exc:
            params, problem = None, str(exc)
        info.kernels.append(KernelDecl(name, params, cxx_linkage=not linkage_c, problem=problem,
                                       template=" ".join(template.group(1).split()) if template else ""))
    return info


def _prefix(text: str, position: int) -> str:
    """The declaration text before ``position`` (back to the previous ``;``, ``{`` or ``}``)."""
    start = max(text.rfind(";", 0, position), text.rfind("{", 0, position), text.rfind("}", 0, position))
    return text[start + 1:position]


def _next_paren(text: str, start: int) -> tuple[int, str] | None:
    """The first ``(`` after ``start`` that follows the declared name, and the text before it."""
    stop = len(text)
    for char in ";{":
        found = text.find(char, start)
        if found >= 0:
            stop = min(stop, found)
    paren = text.find("(", start, stop)
    if paren < 0:
        return None
    return paren, _DECORATIONS.sub(" ", text[start:paren])


def types_of(text: str, info: SourceInfo | None = None) -> SourceInfo:
    """The scalar typedefs and struct layouts of a cleaned source (:func:`clean`), added to ``info``."""
    info = SourceInfo() if info is None else info
    _find_typedefs(text, info)
    _find_structs(text, info)
    return info


def type_name(type_text: str) -> str:
    """The name a type is known by, without qualifiers and ``struct``: ``"const struct pair"`` -> ``"pair"``."""
    words = [w for w in _IDENT.findall(type_text) if w not in _QUALIFIERS]
    return words[-1] if words else ""


def _find_typedefs(text: str, info: SourceInfo) -> None:
    for match in re.finditer(r"\btypedef\s+([^;{}()\[\]]+?)\s+(\w+)\s*;", text):
        if scalar_dtype(match.group(1), info.typedefs) is not None:
            info.typedefs[match.group(2)] = match.group(1)
    for match in re.finditer(r"\busing\s+(\w+)\s*=\s*([^;{}()]+);", text):
        if scalar_dtype(match.group(2), info.typedefs) is not None:
            info.typedefs[match.group(1)] = match.group(2)


def _find_structs(text: str, info: SourceInfo) -> None:
    for match in re.finditer(r"\b(typedef\s+)?(struct|class|union)\s+(\w+)?\s*(:[^{;]*)?\{", text):
        try:
            end = _matching(text, match.end() - 1, "{", "}")
        except SignatureError:
            continue
        fields: list[tuple[str, str]] | None = None
        if match.group(2) != "union" and not match.group(4):
            try:
                fields = _struct_fields(text[match.end():end - 1])
            except SignatureError:  # a member the layout cannot follow (a reference): the struct is unknown
                fields = None
        names = [match.group(3)] if match.group(3) else []
        if match.group(1):  # typedef struct [tag] {...} alias[, *palias];
            tail = text[end:text.find(";", end)] if text.find(";", end) >= 0 else ""
            names += [n for n in re.findall(r"(?<![*\w])(\w+)", tail)]
        for name in names:
            if name not in info.structs or info.structs[name] is None:
                info.structs[name] = fields


def _struct_fields(body: str) -> list[tuple[str, str]] | None:
    """``[(field name, declaration)]`` of a struct body, or None for what the layout cannot follow."""
    flat, index = [], 0
    while index < len(body):  # member function bodies become the end of a member
        brace = body.find("{", index)
        if brace < 0:
            flat.append(body[index:])
            break
        flat.append(body[index:brace] + ";")
        index = _matching(body, brace, "{", "}")
    fields: list[tuple[str, str]] = []
    for chunk in "".join(flat).split(";"):
        chunk = re.sub(r"\b(public|private|protected)\s*:", " ", chunk).strip()
        if not chunk:
            continue
        if re.search(r"\bvirtual\b", chunk):
            return None
        if "(" in chunk or re.match(r"(static|using|typedef|friend|template|enum)\b", chunk):
            continue
        if ":" in chunk.replace("::", ""):
            return None  # a bit-field
        declarators = [d.strip() for d in chunk.split(",")]
        first = parse_param(declarators[0], 0) if declarators[0] else None
        if first is None or not first.name:
            return None
        base = re.sub(r"\s*\*+\s*$", "", first.type_text) if first.pointer else first.type_text
        for position, declarator in enumerate(declarators):
            text = declarator if position == 0 else f"{base} {declarator}"
            array = re.search(r"\[\s*(\d+)\s*\]\s*$", text)
            if "[" in text and array is None:
                return None
            stem = text[:array.start()] if array else text
            member = parse_param(stem, 0)
            if not member.name:
                return None
            kind = "ptr" if member.pointer else member.type_text
            fields.append((member.name, f"{kind}[{array.group(1)}]" if array else kind))
    return fields


def extern_local_arrays(text: str) -> list[str]:
    """Names of ``extern __gpu_local T name[];`` declarations (dynamic work-group memory) in an
    analysis preprocessing, where ``__gpu_local`` reads ``__ol_gpu_local__``."""
    body = clean(text)
    found = []
    for match in re.finditer(r"\bextern\b[^;{}]*?\b" + LOCAL_MARK + r"\b[^;{}]*?\b(\w+)\s*\[\s*\]\s*;", body):
        if match.group(1) not in found:
            found.append(match.group(1))
    return found
