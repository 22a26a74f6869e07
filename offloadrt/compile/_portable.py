"""Portable kernels: one ``<gpuintrin.h>`` C or C++ source for the host, NVIDIA (PTX) and AMD GPUs.

Every build first preprocesses the source once for the analysis (offloadrt's host header with
``__OFFLOADRT_ANALYSIS__``, where ``__gpu_kernel`` and ``__gpu_local`` read as marks) to find the
kernels, their parameters, the dynamic work-group arrays and which kernels reach a barrier or a lane
operation. Then:

- ``cuda``: clang ``--target=nvptx64-nvidia-cuda -march=<sm_XX>`` to PTX;
- ``amdgpu``: clang ``--target=amdgcn-amd-amdhsa -mcpu=<gfxXXX>`` to an object, ``ld.lld -shared``
  to a code object;
- ``host``: the source with offloadrt's ``gpu/`` folder first on the include path, its work-group
  memory declarations rewritten (below), and per kernel a generated wrapper in the host kernel ABI
  (``offloadrt/host_kernel.h``) that copies the argument blob into the parameters and runs the
  group's work-items: a loop, or fibers for the kernels that need them (``gpu/host_runtime.h``).

Work-group memory on the host: ``__gpu_local`` (and ``[[clang::address_space(3)]]``/
``__attribute__((address_space(3)))``) on a variable makes it thread-local: a work-group runs on one
thread, so each group has its own copy. In a pointer or cast the qualifier is dropped (the host has
one address space). ``extern __gpu_local T name[];`` becomes ``name`` = the launch's dynamic
work-group memory. What the rewrite cannot see (such a declaration made by a macro) is a compile
error, never a silently shared variable.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import struct
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import ErrorCode, OffloadError
from . import _analysis, _clang, _inputs, _signature, _types
from ._types import Compiled, Target

LANGS = {"gpu-c": "c", "gpu-c++": "c++"}
GENERATOR = 1  # bump when the generated host wrapper changes (part of the toolchain identity)
INCLUDE = Path(__file__).resolve().parent.parent / "include"
GPU_INCLUDE = INCLUDE / "offloadrt" / "gpu"
_ARCH = {"cuda": re.compile(r"sm_\d+[af]?$"), "amdgpu": re.compile(r"gfx[0-9a-f]+(:[a-z-]+[+-])*$")}
_LOCAL = re.compile(r"__gpu_local\b|\[\[\s*clang::address_space\s*\(\s*3\s*\)\s*\]\]|"
                    r"__attribute__\s*\(\(\s*address_space\s*\(\s*3\s*\)\s*\)\)")
_ANY_ADDRESS_SPACE = re.compile(r"\baddress_space\s*\(")
_COMMENT_OR_LITERAL = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.DOTALL)
_ATTRIBUTES = re.compile(r"__attribute__\s*\(\(.*?\)\)|\[\[.*?\]\]|\balignas\s*\([^)]*\)")
WRAPPER_NAME = "<offloadrt host wrapper>"
WRAPPER_HINT = ("\nnote: the errors in the <offloadrt host wrapper> are in the code offloadrt generates to call each "
                "kernel on the host: kernels declared in a namespace or as templates cannot be called from there "
                "(declare them at file scope; docs/portable-kernels.md)")
_identities: dict[tuple[Any, ...], tuple[str, tuple[str, ...], tuple[tuple[int, int], ...]]] = {}
_identities_lock = threading.Lock()  # guards _identities
_IDENTIFIER = re.compile(r"[A-Za-z_]\w*$")
SOURCE_NAME = {"c": "kernel.c", "c++": "kernel.cpp"}


def toolchain_identity(target: Target) -> str:
    """The compiler (and linker) path and version used for ``target``, and for the host the
    digest of offloadrt's host headers and wrapper generator: what the cache keys on. Kept per
    target and environment while the tools are unchanged (a cached compile asks for it each time)."""
    _check_target(target)
    key = (target.kind, target.arch, os.environ.get("OFFLOADRT_CLANG"), os.environ.get("OFFLOADRT_LLD"),
           os.environ.get("PATH"))
    with _identities_lock:
        known = _identities.get(key)
    if known is not None and _stamps(known[1]) == known[2]:
        return known[0]
    clang = _clang.clang()
    parts = [f"{clang.path}: {clang.banner}"]
    files = [clang.path]
    if target.kind == "amdgpu":
        lld = _clang.lld(clang)
        parts.append(f"{lld.path}: {lld.banner}")
        files.append(lld.path)
    if target.kind == "host":
        parts.append(f"host gpuintrin {_headers_digest()}")
    identity = " | ".join(parts)
    with _identities_lock:
        _identities[key] = (identity, tuple(files), _stamps(tuple(files)))
    return identity


@functools.lru_cache(maxsize=1)
def _headers_digest() -> str:
    """offloadrt's host headers and wrapper generator (read once: they are the package's own files)."""
    digest = hashlib.sha256(str(GENERATOR).encode())
    for header in sorted(GPU_INCLUDE.glob("*.h")) + [INCLUDE / "offloadrt" / "host_kernel.h"]:
        digest.update(header.read_bytes())
    return digest.hexdigest()[:16]


def _stamps(files: tuple[str, ...]) -> tuple[tuple[int, int], ...]:
    stamps = []
    for path in files:
        try:
            status = os.stat(path)
        except OSError:
            return ()
        stamps.append((status.st_mtime_ns, status.st_size))
    return tuple(stamps)


def _check_target(target: Target) -> None:
    if not isinstance(target, Target):
        raise OffloadError(ErrorCode.INVALID_ARGUMENT, f"target must be a Target, not {type(target).__name__}")
    if target.kind not in ("host", "cuda", "amdgpu"):
        raise OffloadError(ErrorCode.UNSUPPORTED, f"portable kernels build for host, cuda or amdgpu, not "
                                                  f"{target.kind!r}")
    if target.kind != "host" and not _ARCH[target.kind].match(target.arch or ""):
        example = "sm_90" if target.kind == "cuda" else "gfx90a"
        raise OffloadError(ErrorCode.UNSUPPORTED, f"a {target.kind} build needs the device's architecture "
                                                  f"(such as {example!r}), not {target.arch!r}")


def compile_portable(source: str, options: Sequence[str], lang: str, target: Target) -> Compiled:
    """Compile a ``<gpuintrin.h>`` source (``lang`` ``"gpu-c"`` or ``"gpu-c++"``) for ``target``.

    ``options`` go to clang as they are (``-DNAME=1``, ``-I<dir>``, ``-std=c++20``...). Raises
    ``COMPILE_FAILURE`` (details: the whole compiler log, or what the host cannot run),
    ``HOST_TOOL_NOT_FOUND`` (clang ≥ 20 or ld.lld missing: what to install) or ``UNSUPPORTED``."""
    if not isinstance(source, str):
        raise OffloadError(ErrorCode.INVALID_ARGUMENT, f"source must be a str, not {type(source).__name__}")
    if lang not in LANGS:
        raise OffloadError(ErrorCode.UNSUPPORTED, f"portable kernels are 'gpu-c' or 'gpu-c++', not {lang!r}")
    if isinstance(options, str) or not all(isinstance(option, str) for option in options):
        raise OffloadError(ErrorCode.INVALID_ARGUMENT, "options must be a sequence of str")
    _check_target(target)
    clang = _clang.clang()
    language = LANGS[lang]
    with tempfile.TemporaryDirectory(prefix="offloadrt-portable-") as folder:
        work = Path(folder)
        analysis = _analyse(clang, work, source, list(options), language)
        if target.kind == "host":
            compiled = _build_host(clang, work, source, list(options), language, analysis)
        elif target.kind == "cuda":
            compiled = _build_ptx(clang, work, source, list(options), language, target.arch, analysis)
        else:
            compiled = _build_amdgpu(clang, work, source, list(options), language, target.arch, analysis)
        compiled.inputs = _depends(work, source, options)
        return compiled


def _depends(work: Path, source: str, options: Sequence[str]) -> _types.Inputs | None:
    """What the analysis and the build read besides the source (their ``-MD`` files), for the
    cache; None when that is unknown."""
    try:
        cwd = os.getcwd()
        made = [_inputs.from_make((work / name).read_text(errors="replace"), cwd, str(work))
                for name in ("analysis.d", "build.d")]
    except OSError:
        return None
    return _inputs.reported(_inputs.merge(*made), source, cwd, options)


# ---- the analysis ----------------------------------------------------------------------------------

class Analysis:
    """What the analysis preprocessing found: kernels, signatures, dynamic arrays, the call graph."""

    def __init__(self, text: str, cxx: bool) -> None:
        self.text = text
        self.failure = ""  # why the source's declarations could not be read (GPU builds go on from the binary)
        try:
            self.info = _signature.analyse(text, cxx=cxx)
        except _signature.SignatureError as exc:
            self.info, self.failure = _signature.SourceInfo(is_cxx=cxx), str(exc)
        self.graph = _analysis.call_graph(text)
        self.extern_locals = _signature.extern_local_arrays(text)
        self.signatures: dict[str, tuple[Any, ...] | None] = {}
        self.problems: dict[str, str] = {}
        for kernel in self.info.kernels:
            try:
                self.signatures[kernel.name] = _signature.signature(kernel, self.info)
            except _signature.SignatureError as exc:
                self.signatures[kernel.name] = None
                self.problems[kernel.name] = str(exc)


def _analyse(clang: _clang.Tool, work: Path, source: str, options: list[str], language: str) -> Analysis:
    path = work / SOURCE_NAME[language]
    path.write_text(source)
    out = work / "analysis.i"
    _clang.run([clang.path, "-E", "-x", language, "-D__OFFLOADRT_ANALYSIS__", f"-I{GPU_INCLUDE}", f"-I{INCLUDE}",
                *options, str(path), "-o", str(out), "-MD", "-MF", str(work / "analysis.d")],
               "preprocessing the portable source")
    return Analysis(out.read_text(errors="replace"), language == "c++")


# ---- GPU builds ------------------------------------------------------------------------------------

def _build_depends(work: Path) -> list[str]:
    """The build's ``-MD`` options: what it read goes to ``build.d`` (for the cache)."""
    return ["-MD", "-MF", str(work / "build.d")]


def _gpu_command(clang: _clang.Tool, target: str, arch_flag: str, language: str, options: list[str]) -> list[str]:
    return [clang.path, f"--target={target}", arch_flag, "-nogpulib", "-nostdlibinc", "-O3", "-x", language, *options]


def _build_ptx(clang: _clang.Tool, work: Path, source: str, options: list[str], language: str, arch: str,
               analysis: Analysis) -> Compiled:
    path, out = work / SOURCE_NAME[language], work / "kernel.ptx"
    log = _clang.run([*_gpu_command(clang, "nvptx64-nvidia-cuda", f"-march={arch}", language, options), "-S",
                      str(path), "-o", str(out), *_build_depends(work)],
                     f"compiling the portable source to PTX for {arch}")
    ptx = out.read_text()
    entries = _signature.ptx_entries(ptx)
    kernels: dict[str, tuple[Any, ...] | None] = {}
    symbols: dict[str, str] = {}
    claimed: set[str] = set()
    for kernel in analysis.info.kernels:
        symbol = _signature.symbol_for(kernel.name, kernel.cxx_linkage, list(entries))
        if symbol not in entries:
            continue  # not in this build (#if'd out for NVPTX)
        claimed.add(symbol)
        if symbol != kernel.name:
            symbols[kernel.name] = symbol
        parsed = analysis.signatures.get(kernel.name)
        if parsed is not None and _signature.matches_ptx(parsed, entries[symbol]):
            kernels[kernel.name] = parsed
        else:
            kernels[kernel.name] = _ptx_signature(entries[symbol])
    for symbol, params in entries.items():  # kernels the analysis could not see (made by macros)
        if symbol not in claimed and _IDENTIFIER.match(symbol):  # not the constructor/destructor kernels
            kernels[symbol] = _ptx_signature(params)
    return Compiled(ptx.encode(), kernels, symbols, log)


def _ptx_signature(params: list[tuple[str, int, int]]) -> tuple[Any, ...] | None:
    try:
        return _signature.ptx_signature(params)
    except _signature.SignatureError:
        return None


def _build_amdgpu(clang: _clang.Tool, work: Path, source: str, options: list[str], language: str, arch: str,
                  analysis: Analysis) -> Compiled:
    lld = _clang.lld(clang)
    path, obj, out = work / SOURCE_NAME[language], work / "kernel.o", work / "kernel.hsaco"
    log = _clang.run([*_gpu_command(clang, "amdgcn-amd-amdhsa", f"-mcpu={arch}", language, options), "-c",
                      str(path), "-o", str(obj), *_build_depends(work)], f"compiling the portable source for {arch}")
    log += _clang.run([lld.path, "-shared", str(obj), "-o", str(out)], f"linking the {arch} code object")
    image = out.read_bytes()
    names = elf_symbols(image)
    entry_points = [name[:-3] for name in names if name.endswith(".kd")]
    kernels: dict[str, tuple[Any, ...] | None] = {}
    symbols: dict[str, str] = {}
    claimed: set[str] = set()
    for kernel in analysis.info.kernels:
        symbol = _signature.symbol_for(kernel.name, kernel.cxx_linkage, entry_points)
        if symbol not in entry_points:
            continue
        claimed.add(symbol)
        if symbol != kernel.name:
            symbols[kernel.name] = symbol
        kernels[kernel.name] = analysis.signatures.get(kernel.name)
    for symbol in entry_points:
        if symbol not in claimed and _IDENTIFIER.match(symbol):
            kernels[symbol] = None
    return Compiled(image, kernels, symbols, log)


def elf_symbols(image: bytes) -> list[str]:
    """The names in an ELF64 little-endian image's symbol tables (``.symtab`` and ``.dynsym``)."""
    try:
        if image[:4] != b"\x7fELF" or image[4] != 2 or image[5] != 1:
            return []
        shoff, = struct.unpack_from("<Q", image, 0x28)
        shentsize, shnum = struct.unpack_from("<HH", image, 0x3A)
        sections = [struct.unpack_from("<IIQQQQIIQQ", image, shoff + index * shentsize) for index in range(shnum)]
        names: list[str] = []
        for _, kind, _, _, offset, size, link, _, _, entsize in sections:
            if kind not in (2, 11) or not entsize:  # SHT_SYMTAB, SHT_DYNSYM
                continue
            strings = sections[link]
            base, end = strings[4], strings[4] + strings[5]
            for index in range(1, size // entsize):
                name_offset, = struct.unpack_from("<I", image, offset + index * entsize)
                stop = image.index(b"\0", base + name_offset, end)
                name = image[base + name_offset:stop].decode()
                if name and name not in names:
                    names.append(name)
        return names
    except (struct.error, ValueError, IndexError, UnicodeDecodeError):
        return []


# ---- the host build --------------------------------------------------------------------------------

def _mask(text: str) -> str:
    """``text`` with comments and literals blanked (same length and lines), for finding declarations."""
    def blank(match: re.Match[str]) -> str:
        return "".join("\n" if char == "\n" else " " for char in match.group(0))
    return _COMMENT_OR_LITERAL.sub(blank, text)


def rewrite_local_memory(source: str, file_name: str) -> tuple[str, list[str]]:
    """The host version of a source's work-group memory declarations (see the module's docstring):
    the new text and the dynamic arrays found."""
    masked = _mask(source)
    edits: list[tuple[int, int, str]] = []
    dynamic: list[str] = []
    for match in re.finditer(r"\bextern\b([^;{}]*?)\b([A-Za-z_]\w*)\s*\[\s*\]\s*;", masked):
        prefix = match.group(1)
        if not _LOCAL.search(prefix):
            continue
        element = " ".join(_ATTRIBUTES.sub(" ", _LOCAL.sub(" ", source[match.start(1):match.end(1)])).split())
        if not element:
            continue
        name = match.group(2)
        line_end = masked.find("\n", match.end())
        line_end = len(masked) if line_end < 0 else line_end
        next_line = masked.count("\n", 0, line_end) + 2
        # The declaration becomes blanks; after its line, `name` becomes the launch's dynamic memory.
        edits.append((match.start(), match.end(), _blank(source[match.start():match.end()])))
        edits.append((line_end, line_end, f"\n#define {name} (({element} *)__ol_gpu.dyn)\n"
                                          f"#line {next_line} \"{file_name}\""))
        dynamic.append(name)
    covered = [(start, end) for start, end, _ in edits]
    initialised: list[int] = []
    for match in _LOCAL.finditer(masked):
        if any(start <= match.start() < end for start, end in covered):
            continue
        rest = re.match(r"[^;,(){}=]*", masked[match.end():])
        in_pointer = rest is not None and re.search(r"[*&]", rest.group(0)) is not None
        ahead = masked[match.end():match.end() + 300]
        in_cast = rest is not None and ahead[len(rest.group(0)):len(rest.group(0)) + 1] == ")"
        if in_pointer or in_cast:
            edits.append((match.start(), match.end(), _blank(match.group(0))))
            continue
        if re.match(r"=(?!=)", ahead[len(rest.group(0)) if rest else 0:]):
            initialised.append(_line_of(masked, match.start()))
        elif not match.group(0).startswith("__gpu_local"):
            edits.append((match.start(), match.end(), "__thread"))
    if initialised:
        lines = ", ".join(str(line) for line in initialised)
        raise OffloadError(ErrorCode.COMPILE_FAILURE,
                           f"{file_name}: line {lines}: work-group memory (__gpu_local) cannot have an initializer: "
                           "GPUs do not initialise it, so each work-group must write it before reading it")
    text = source
    for start, end, replacement in sorted(edits, key=lambda edit: (edit[0], edit[1]), reverse=True):
        text = text[:start] + replacement + text[end:]
    return text, dynamic


def _line_of(text: str, position: int) -> int:
    return text.count("\n", 0, position) + 1


def _blank(text: str) -> str:
    return "".join("\n" if char == "\n" else " " for char in text)


def _check_host_support(analysis: Analysis, source: str, dynamic: list[str], file_name: str) -> None:
    """What the host cannot run is a compile error, never a wrong result."""
    def _fail(message: str) -> OffloadError:
        return OffloadError(ErrorCode.COMPILE_FAILURE, f"{file_name}: cannot build for the host device: {message}")

    if analysis.failure:
        raise _fail(f"cannot read the source's declarations to generate the kernels' wrappers: {analysis.failure}")

    unseen = [name for name in analysis.extern_locals if name not in dynamic]
    if unseen:
        raise _fail(f"dynamic work-group memory {', '.join(unseen)} is declared through a macro; on the host "
                    "device write `extern __gpu_local T name[];` in the source itself (docs/portable-kernels.md)")
    masked = _mask(source)
    raw_spaces = len(_ANY_ADDRESS_SPACE.findall(masked))
    local_spaces = len([m for m in _LOCAL.finditer(masked) if "address_space" in m.group(0)])
    if raw_spaces > local_spaces:
        raise _fail("the host device has one address space: only address_space(3) (work-group memory, "
                    "better written __gpu_local) is supported there (docs/portable-kernels.md)")
    user_text = _signature.clean(analysis.text)
    if len(_ANY_ADDRESS_SPACE.findall(user_text)) > local_spaces:
        raise _fail("an address_space attribute comes from a macro; on the host device write work-group memory "
                    "as __gpu_local in the source itself (docs/portable-kernels.md)")
    for kernel in analysis.info.kernels:
        if analysis.signatures.get(kernel.name) is None:
            raise _fail(f"kernel {kernel.name!r}: cannot read its parameters for the wrapper: "
                        f"{analysis.problems.get(kernel.name, 'unknown types')}")


def _wrapper(analysis: Analysis, cxx: bool) -> str:
    """The host-ABI entry points of every kernel (appended to the source)."""
    out = ["", "#include <gpuintrin.h>", "#include <offloadrt/host_kernel.h>"]
    if cxx:
        out.append('extern "C" {')
    for kernel in analysis.info.kernels:
        name = kernel.name
        params = kernel.params or ()
        call_args = ", ".join(f"__a->p{index}" for index in range(len(params)))
        args_type = f"struct __ol_args_{name}"
        if params:
            out.append(f"{args_type} {{ {' '.join(f'{param.field};' for param in params)} }};")
        fibers = _analysis.needs_fibers(name, analysis.graph)
        pointer = f"const {args_type} *__a" if params else "const void *__a"
        if fibers:
            out += [f"static void __ol_item_{name}(const void *__p) {{",
                    f"  {pointer} = ({'const ' + args_type + ' *' if params else 'const void *'})__p;",
                    "  (void)__a;",
                    f"  {name}({call_args});",
                    "}"]
        else:
            out += [f"__attribute__((noinline)) static void __ol_items_{name}({pointer}) {{"]
            if params:  # parameters in locals: stores through the kernel's pointers cannot change them
                out += [f"  const {args_type} __v = *__a;"]
                call_args = ", ".join(f"__v.p{index}" for index in range(len(params)))
            out += ["  (void)__a;",
                    "  const uint32_t __nx = __ol_gpu.ntid[0], __ny = __ol_gpu.ntid[1], __nz = __ol_gpu.ntid[2];",
                    "  for (uint32_t __z = 0; __z < __nz; ++__z) {",
                    "    __ol_gpu.tid[2] = __z;",
                    "    for (uint32_t __y = 0; __y < __ny; ++__y) {",
                    "      __ol_gpu.tid[1] = __y;",
                    "      for (uint32_t __x = 0; __x < __nx; ++__x) {",
                    "        __ol_gpu.tid[0] = __x;",
                    f"        {name}({call_args});",
                    "      }",
                    "    }",
                    "  }",
                    "}"]
        entry = f"__ol_entry_{name}"
        out += [f'OL_HOST_EXPORT int {entry}(const void *__args, const ol_host_launch_t *__launch) '
                f'__asm__("{name}");',
                f"int {entry}(const void *__args, const ol_host_launch_t *__launch) {{"]
        if params:
            out += [f"  {args_type} __a;", "  __builtin_memcpy(&__a, __args, sizeof __a);"]
        else:
            out += ["  const void *__a = __args;"]
        run = (f"__ol_gpu_run_fibers(__ol_item_{name}, {'&' if params else ''}__a)" if fibers
               else f"(__ol_items_{name}({'&' if params else ''}__a), 0)")
        if analysis.extern_locals and _analysis.reaches(name, analysis.graph, set(analysis.extern_locals)):
            out += ["  if (!__launch->dyn_shared_memory)  /* a GPU would read unmapped memory */",
                    "    return OL_GPU_FAULT_NO_DYNAMIC_MEMORY;"]
        out += ["  __ol_gpu_begin_group(__launch);",
                "  if (__builtin_setjmp(__ol_gpu.escape))",
                "    return __ol_gpu.fault;",
                f"  return {run};",
                "}"]
        out.append(f"OL_HOST_KERNEL_ARGS({name}, {args_type});" if params else f"OL_HOST_KERNEL_NO_ARGS({name});")
    if cxx:
        out.append('}')
    return "\n".join(out) + "\n"


def host_source(source: str, analysis: Analysis, language: str) -> str:
    """The whole translation unit the host build compiles (also for reading what offloadrt made)."""
    file_name = SOURCE_NAME[language]
    text, dynamic = rewrite_local_memory(source, file_name)
    _check_host_support(analysis, source, dynamic, file_name)
    # A C-linkage kernel's own symbol moves aside; its exported name is the host-ABI entry point.
    renames = [f"#pragma redefine_extname {kernel.name} __ol_kernel_{kernel.name}"
               for kernel in analysis.info.kernels if not kernel.cxx_linkage]
    if renames:  # clang warns at every other declaration of that name (a local variable): not the user's doing
        renames.append('#pragma clang diagnostic ignored "-Wpragmas"')
    head = "\n".join(renames + [f'#line 1 "{file_name}"'])
    tail = f'\n#line 1 "{WRAPPER_NAME}"\n' + _wrapper(analysis, language == "c++")
    return f"{head}\n{text}\n{tail}"


def _build_host(clang: _clang.Tool, work: Path, source: str, options: list[str], language: str,
                analysis: Analysis) -> Compiled:
    text = host_source(source, analysis, language)
    path, out = work / f"host_{SOURCE_NAME[language]}", work / "kernel.so"
    path.write_text(text)
    driver = ["--driver-mode=g++", "-fno-exceptions"] if language == "c++" else []
    try:
        log = _clang.run([clang.path, *driver, "-x", language, "-O3", "-fPIC", "-shared", "-Wl,-z,defs",
                          f"-I{GPU_INCLUDE}", f"-I{INCLUDE}", *options, str(path), "-o", str(out),
                          *_build_depends(work)],
                         "compiling the portable source for the host")
    except OffloadError as exc:
        if exc.code == ErrorCode.COMPILE_FAILURE and f"{WRAPPER_NAME}:" in exc.details:
            raise OffloadError(ErrorCode.COMPILE_FAILURE, exc.details + WRAPPER_HINT) from None
        raise
    kernels = {kernel.name: analysis.signatures[kernel.name] for kernel in analysis.info.kernels}
    return Compiled(out.read_bytes(), kernels, {}, log)


def kernels_needing_fibers(source: str, lang: str = "gpu-c", options: Sequence[str] = ()) -> dict[str, bool]:
    """Each kernel of a portable source, and whether the host runs its work-items as fibers."""
    clang = _clang.clang()
    with tempfile.TemporaryDirectory(prefix="offloadrt-portable-") as folder:
        analysis = _analyse(clang, Path(folder), source, list(options), LANGS[lang])
    return {kernel.name: _analysis.needs_fibers(kernel.name, analysis.graph) for kernel in analysis.info.kernels}
