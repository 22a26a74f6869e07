"""Kernel signatures from source text and from PTX: which kernels a source defines and their parameters.

The parser reads the C-family declarations kernels use, not all of C++: a kernel is a function
marked ``__gpu_kernel`` (or what it expands to), ``__global__`` or ``OL_HOST_KERNEL``; each
parameter is a scalar, a pointer, or a struct by value whose definition is in the source. A
parameter it cannot read makes the kernel's signature unknown (``None``), never a guess.
Signatures use the forms ``Kernel.signature`` accepts: NumPy type names (``"float32"``), ``"ptr"``,
and ``ctypes.Structure`` types for structs.
"""

from __future__ import annotations

import ctypes
import re
from dataclasses import dataclass, field
from typing import Any

_COMMENT_OR_LITERAL = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.DOTALL)
_LINE_MARKER = re.compile(r"^[ \t]*#[^\n]*", re.MULTILINE)
_IDENT = re.compile(r"[A-Za-z_]\w*")
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
_CTYPES = {"int8": ctypes.c_int8, "uint8": ctypes.c_uint8, "int16": ctypes.c_int16, "uint16": ctypes.c_uint16,
           "int32": ctypes.c_int32, "uint32": ctypes.c_uint32, "int64": ctypes.c_int64, "uint64": ctypes.c_uint64,
           "float32": ctypes.c_float, "float64": ctypes.c_double, "bool": ctypes.c_bool, "float16": ctypes.c_uint16}
_SIZES = {"int8": 1, "uint8": 1, "bool": 1, "int16": 2, "uint16": 2, "float16": 2, "int32": 4, "uint32": 4,
          "float32": 4, "int64": 8, "uint64": 8, "float64": 8}


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
    """A kernel defined in a source: its name, C++ linkage and parameters (None: unreadable)."""

    name: str
    params: tuple[Param, ...] | None
    cxx_linkage: bool
    problem: str = ""


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
    info = SourceInfo(is_cxx=cxx)
    _find_typedefs(body, info)
    _find_structs(body, info)
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
        linkage_c = (not cxx) or 'extern "C"' in _prefix(body, match.start()) or any(
            a <= match.start() < b for a, b in extern_c)
        try:
            params: tuple[Param, ...] | None = parse_params(body[paren + 1:close - 1])
            problem = ""
        except SignatureError as exc:
            params, problem = None, str(exc)
        info.kernels.append(KernelDecl(name, params, cxx_linkage=not linkage_c, problem=problem))
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


# ---- signatures for Kernel.signature -------------------------------------------------------------

_STRUCT_TYPES: dict[tuple[Any, ...], type] = {}


def _ctype(type_text: str, info: SourceInfo, depth: int = 0) -> Any:
    if depth > 16:
        raise SignatureError("structs nested too deeply")
    count = 1
    array = re.fullmatch(r"(.*)\[(\d+)\]", type_text)
    if array:
        type_text, count = array.group(1), int(array.group(2))
    if type_text == "ptr":
        base: Any = ctypes.c_void_p
    else:
        dtype = scalar_dtype(type_text, info.typedefs)
        if dtype is not None:
            base = _CTYPES[dtype]
        elif re.fullmatch(r"(enum\s+)?\w+", type_text.strip()) and type_text.strip().startswith("enum"):
            base = ctypes.c_int
        else:
            base = _struct_type(type_text, info, depth + 1)
    return base * count if array else base


def _struct_type(type_text: str, info: SourceInfo, depth: int) -> type:
    words = [w for w in _IDENT.findall(type_text) if w not in _QUALIFIERS]
    name = words[-1] if words else ""
    fields = info.structs.get(name)
    if fields is None:
        raise SignatureError(f"the layout of {type_text!r} is unknown (define it in the source as a plain struct)")
    members = tuple((field_name, _ctype(kind, info, depth)) for field_name, kind in fields)
    key = (name, members)
    made = _STRUCT_TYPES.get(key)
    if made is None:
        made = type(name, (ctypes.Structure,), {"_fields_": list(members), "__module__": "offloadrt.kernels"})
        _STRUCT_TYPES[key] = made
    return made


def signature(kernel: KernelDecl, info: SourceInfo) -> tuple[Any, ...]:
    """``Kernel.signature`` of a kernel; raises :class:`SignatureError` when a type is unknown."""
    if kernel.params is None:
        raise SignatureError(kernel.problem or "unreadable parameters")
    entries: list[Any] = []
    for param in kernel.params:
        if param.pointer:
            entries.append("ptr")
            continue
        dtype = scalar_dtype(param.type_text, info.typedefs)
        if dtype is not None:
            entries.append(dtype)
        elif re.match(r"enum\b", param.type_text):
            entries.append("int32")
        else:
            entries.append(_struct_type(param.type_text, info, 0))
    return tuple(entries)


def describe(entries: tuple[Any, ...]) -> list[Any]:
    """A signature as JSON data (structs as their fields), for the cache."""
    return [_describe(entry) for entry in entries]


def _describe(entry: Any) -> Any:
    if isinstance(entry, str):
        return entry
    if isinstance(entry, type) and issubclass(entry, ctypes.Array):
        return {"array": _describe(entry._type_), "length": entry._length_}
    if entry is ctypes.c_void_p:
        return "ptr"
    if isinstance(entry, type) and issubclass(entry, ctypes.Structure):
        return {"struct": entry.__name__, "fields": [[f[0], _describe(f[1])] for f in entry._fields_]}
    for name, kind in _CTYPES.items():
        if entry is kind:
            return name
    raise TypeError(f"cannot describe {entry!r}")


def rebuild(described: list[Any]) -> tuple[Any, ...]:
    """The signature :func:`describe` wrote."""
    return tuple(_rebuild(entry, top=True) for entry in described)


def _rebuild(entry: Any, top: bool = False) -> Any:
    if isinstance(entry, str):
        if top:
            return entry
        return ctypes.c_void_p if entry == "ptr" else _CTYPES[entry]
    if "array" in entry:
        return _rebuild(entry["array"]) * int(entry["length"])
    members = tuple((name, _rebuild(kind)) for name, kind in entry["fields"])
    key = (entry["struct"], members)
    made = _STRUCT_TYPES.get(key)
    if made is None:
        made = type(entry["struct"], (ctypes.Structure,),
                    {"_fields_": list(members), "__module__": "offloadrt.kernels"})
        _STRUCT_TYPES[key] = made
    return made


def size_and_alignment(entry: Any) -> tuple[int, int]:
    """The bytes and alignment a signature entry takes in the argument blob."""
    if isinstance(entry, str):
        size = 8 if entry == "ptr" else _SIZES[entry]
        return size, size
    return ctypes.sizeof(entry), ctypes.alignment(entry)


# ---- the host kernel ABI ---------------------------------------------------------------------------

def host_abi_kernels(text: str) -> dict[str, tuple[Any, ...] | None]:
    """Signatures of host-ABI kernels from their ``OL_HOST_KERNEL_ARGS(kernel, struct args)``: the
    struct's members are the parameters (``OL_HOST_KERNEL_NO_ARGS``: none)."""
    body = clean(text)
    info = SourceInfo()
    _find_typedefs(body, info)
    _find_structs(body, info)
    found: dict[str, tuple[Any, ...] | None] = {}
    for match in re.finditer(r"\bOL_HOST_KERNEL_NO_ARGS\s*\(\s*(\w+)\s*\)", body):
        found[match.group(1)] = ()
    for match in re.finditer(r"\bOL_HOST_KERNEL_ARGS\s*\(\s*(\w+)\s*,\s*([^)]+)\)", body):
        try:
            layout = _struct_type(match.group(2), info, 0)
            members: Any = getattr(layout, "_fields_")  # noqa: B009  # a ctypes.Structure made at run time
            found[match.group(1)] = tuple(_top_entry(member[1]) for member in members)
        except SignatureError:
            found[match.group(1)] = None
    return found


def _top_entry(kind: Any) -> Any:
    if kind is ctypes.c_void_p:
        return "ptr"
    for name, ctype in _CTYPES.items():
        if kind is ctype and name != "float16":
            return name
    return kind


# ---- PTX ----------------------------------------------------------------------------------------------

_PTX_ENTRY = re.compile(r"\.entry\s+([\w$.%]+)\s*\(([^)]*)\)")
_PTX_TYPES = {"u8": "uint8", "s8": "int8", "b8": "uint8", "u16": "uint16", "s16": "int16", "b16": "uint16",
              "f16": "float16", "u32": "uint32", "s32": "int32", "b32": "uint32", "f32": "float32",
              "u64": "ptr", "s64": "int64", "b64": "ptr", "f64": "float64"}


def ptx_entries(ptx: str) -> dict[str, list[tuple[str, int, int]]]:
    """Each ``.entry``'s parameters as (PTX type, size, alignment); a ``.b8 name[N]`` array is ("b8[]", N, align)."""
    entries: dict[str, list[tuple[str, int, int]]] = {}
    for match in _PTX_ENTRY.finditer(ptx):
        params = []
        for declaration in match.group(2).split(","):
            if not declaration.strip():
                continue
            align_match = re.search(r"\.align\s+(\d+)", declaration)
            type_match = re.search(r"\.(u8|s8|b8|u16|s16|b16|f16|u32|s32|b32|f32|u64|s64|b64|f64)\b", declaration)
            array = re.search(r"\[(\d+)\]", declaration)
            kind = type_match.group(1) if type_match else "b8"
            unit = int(kind[1:]) // 8
            if array:
                size = unit * int(array.group(1))
                params.append((f"{kind}[]", size, int(align_match.group(1)) if align_match else unit))
            else:
                params.append((kind, unit, int(align_match.group(1)) if align_match and not array else unit))
        entries[match.group(1)] = params
    return entries


def ptx_signature(params: list[tuple[str, int, int]]) -> tuple[Any, ...]:
    """A signature from PTX parameters alone: 64-bit values as "ptr" (an address or an int), others by
    their PTX type (which carries no signedness for ``.u``/``.b``), arrays as opaque bytes."""
    entries: list[Any] = []
    for kind, size, align in params:
        if kind.endswith("[]"):
            unit = {1: ctypes.c_uint8, 2: ctypes.c_uint16, 4: ctypes.c_uint32, 8: ctypes.c_uint64}.get(align)
            if unit is None or size % align:
                raise SignatureError(f"cannot lay out a {size}-byte parameter aligned to {align}")
            entries.append(_rebuild({"struct": f"bytes{size}_align{align}",
                                     "fields": [["bytes", {"array": _describe(unit), "length": size // align}]]}))
        else:
            entries.append(_PTX_TYPES[kind])
    return tuple(entries)


def matches_ptx(entries: tuple[Any, ...], params: list[tuple[str, int, int]]) -> bool:
    """Whether a source signature agrees with the PTX parameters in number and sizes."""
    return len(entries) == len(params) and all(
        size_and_alignment(entry)[0] == size for entry, (_, size, _) in zip(entries, params))


def symbol_for(name: str, cxx_linkage: bool, symbols: list[str]) -> str:
    """The symbol of kernel ``name`` among a binary's ``symbols``: itself, or (C++ linkage) its mangled name."""
    if name in symbols or not cxx_linkage:
        return name
    prefix = f"_Z{len(name)}{name}"
    for symbol in symbols:
        if symbol.startswith(prefix):
            return symbol
    return name


def extern_local_arrays(text: str) -> list[str]:
    """Names of ``extern __gpu_local T name[];`` declarations (dynamic work-group memory) in an
    analysis preprocessing, where ``__gpu_local`` reads ``__ol_gpu_local__``."""
    body = clean(text)
    found = []
    for match in re.finditer(r"\bextern\b[^;{}]*?\b" + LOCAL_MARK + r"\b[^;{}]*?\b(\w+)\s*\[\s*\]\s*;", body):
        if match.group(1) not in found:
            found.append(match.group(1))
    return found
