"""Portable kernels for the host device: the source rewritten for one address space, with a wrapper
per kernel in offloadrt's host kernel ABI, built by clang into a shared object.

The source is compiled with offloadrt's ``gpu/`` folder first on the include path, its work-group
memory declarations rewritten, and per kernel a generated wrapper in the host kernel ABI
(``offloadrt/host_kernel.h``) that copies the argument blob into the parameters and runs the
group's work-items: a loop, or fibers for the kernels that need them (``gpu/host_runtime.h``).

Work-group memory on the host: ``__gpu_local`` (and ``[[clang::address_space(3)]]``/
``__attribute__((address_space(3)))``) on a variable makes it thread-local: a work-group runs on one
thread, so each group has its own copy. In a pointer or cast the qualifier is dropped (the host has
one address space). ``extern __gpu_local T name[];`` becomes ``name`` = the launch's dynamic
work-group memory. What the rewrite cannot see (such a declaration made by a macro) is a compile
error, never a silently shared variable.

The build is for the CPU that runs it: ``-march=native`` unless the options name a target CPU
themselves (``-march=``, ``-mcpu=``, ``-mtune=``: theirs win) or ``$OFFLOADRT_HOST_MARCH`` says
otherwise (``generic``: clang's default CPU; any other value ``V``: ``-march=V``). The cache keys on
what ``-march=native`` means here (:func:`cpu_identity`), so an image built for another CPU in a
shared cache folder is not loaded.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import threading
from collections.abc import Sequence
from pathlib import Path

from ..errors import ErrorCode, OffloadError
from . import _clang, _regions
from ._analysis import GPU_INCLUDE, INCLUDE, SOURCE_NAME, Analysis, build_depends, needs_fibers, reaches
from ._declarations import KernelDecl, clean
from ._types import Compiled

_LOCAL = re.compile(r"__gpu_local\b|\[\[\s*clang::address_space\s*\(\s*3\s*\)\s*\]\]|"
                    r"__attribute__\s*\(\(\s*address_space\s*\(\s*3\s*\)\s*\)\)")
_ANY_ADDRESS_SPACE = re.compile(r"\baddress_space\s*\(")
_COMMENT_OR_LITERAL = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.DOTALL)
_ATTRIBUTES = re.compile(r"__attribute__\s*\(\(.*?\)\)|\[\[.*?\]\]|\balignas\s*\([^)]*\)")
MARCH_ENV = "OFFLOADRT_HOST_MARCH"
FIBERS_OPTION = "-D__OFFLOADRT_HOST_FIBERS"  # every barrier kernel runs as fibers (no work-group regions)
_PREPROCESSED = {"c": "cpp-output", "c++": "c++-cpp-output"}
_INCLUDE_OPTIONS = ("-I", "-isystem", "-iquote", "-idirafter")
_NO_REGIONS_OPTIONS = ("-include", "-imacros", "--include", "-E", "-M", "-save-temps", "-x")  # .i builds differ
_TARGET_CPU_OPTIONS = ("-march=", "-mcpu=", "-mtune=")  # a user's choice of CPU: offloadrt adds none
_natives: dict[tuple[str, int], str | None] = {}  # (clang, its mtime) -> what -march=native means here
_natives_lock = threading.Lock()  # guards _natives
WRAPPER_NAME = "<offloadrt host wrapper>"
WRAPPER_HINT = ("\nnote: the errors in the <offloadrt host wrapper> are in the code offloadrt generates to call each "
                "kernel on the host: kernels declared in a namespace or as templates cannot be called from there "
                "(declare them at file scope; docs/portable-kernels.md)")


def host_march() -> str:
    """The ``-march`` value host builds take by default: ``$OFFLOADRT_HOST_MARCH``, else ``"native"``;
    ``""`` (for ``generic`` or an empty variable) is none: clang's default CPU."""
    value = os.environ.get(MARCH_ENV, "native").strip()
    return "" if value in ("", "generic") else value


def march_options(clang: _clang.Tool, options: Sequence[str]) -> list[str]:
    """The CPU options offloadrt puts before the user's: none when the user names a CPU (``-march=``,
    ``-mcpu=``, ``-mtune=``), when ``$OFFLOADRT_HOST_MARCH`` is ``generic``, or when clang cannot tell
    what ``native`` is on this machine; else ``-march=<value>``."""
    if any(option.startswith(_TARGET_CPU_OPTIONS) for option in options):
        return []
    value = host_march()
    if not value or (value == "native" and native_cpu(clang) is None):
        return []
    return [f"-march={value}"]


def cpu_identity(clang: _clang.Tool) -> str:
    """What the default CPU option builds for, for the cache key: the target CPU and a digest of the
    features ``-march=native`` means to this clang on this machine, or the value named instead."""
    value = host_march()
    if value != "native":
        return f"-march={value or '(clang default)'}"
    return f"-march=native {native_cpu(clang) or '(unknown to clang: not used)'}"


def native_cpu(clang: _clang.Tool) -> str | None:
    """``<target cpu> <digest of its features>`` that ``-march=native`` means to ``clang`` here, read
    from the compile command ``clang -march=native -###`` prints (run once per clang binary per
    process: a few tens of milliseconds); None where clang refuses ``-march=native``."""
    try:
        key = (clang.path, os.stat(clang.path).st_mtime_ns)
    except OSError:
        return None
    with _natives_lock:
        if key in _natives:
            return _natives[key]
    try:
        shown = subprocess.run([clang.path, "-march=native", "-###", "-x", "c", "-c", os.devnull, "-o", os.devnull],
                               capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.SubprocessError):
        return None  # not remembered: a passing failure to run clang is not an answer about this CPU
    cpu = re.search(r'"-target-cpu" "([^"]+)"', shown.stderr)
    found = None
    if shown.returncode == 0 and cpu is not None:
        features = sorted(re.findall(r'"-target-feature" "([^"]+)"', shown.stderr))
        found = f"{cpu.group(1)} {hashlib.sha256(' '.join(features).encode()).hexdigest()[:16]}"
    with _natives_lock:
        _natives[key] = found
    return found


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
    user_text = clean(analysis.text)
    if len(_ANY_ADDRESS_SPACE.findall(user_text)) > local_spaces:
        raise _fail("an address_space attribute comes from a macro; on the host device write work-group memory "
                    "as __gpu_local in the source itself (docs/portable-kernels.md)")
    for kernel in analysis.info.kernels:
        if kernel.template:
            raise _fail(template_advice(kernel))
        if analysis.signatures.get(kernel.name) is None:
            raise _fail(f"kernel {kernel.name!r}: cannot read its parameters for the wrapper: "
                        f"{analysis.problems.get(kernel.name, 'unknown types')}")


def template_advice(kernel: KernelDecl) -> str:
    """Why a function template marked ``__gpu_kernel`` is not a kernel on the host, and the plain
    kernel to write instead (with the kernel's own parameters where they can be shown)."""
    name, params = kernel.name, kernel.params or ()
    types = re.findall(r"\b(?:typename|class)\s+(\w+)", kernel.template)
    if types and len(types) == len(kernel.template.split(",")) and params and all(
            param.name and "(" not in param.type_text for param in params):
        as_float = re.compile(rf"\b(?:{'|'.join(types)})\b")
        declared = ", ".join(f"{as_float.sub('float', param.type_text)} {param.name}" for param in params)
        instance = f"{name}<{', '.join('float' for _ in types)}>({', '.join(param.name for param in params)})"
        example = f"__gpu_kernel void {name}_float({declared}) {{ {instance}; }}"
    else:
        example = f"__gpu_kernel void {name}_float(float *x, uint32_t n) {{ {name}<float>(x, n); }}"
    return (f"kernel {name!r} is a function template (template <{kernel.template}>), and a template is not a "
            f"kernel: it has no parameter types until it is instantiated, and offloadrt calls each kernel "
            f"through one generated wrapper. Take __gpu_kernel off the template and mark a plain (non-template) "
            f"function that calls the instance you need: `{example}` (docs/portable-kernels.md)")


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
        fibers = needs_fibers(name, analysis.graph)
        pointer = f"const {args_type} *__a" if params else "const void *__a"
        if fibers:
            out += [f"static __attribute__((unused)) void __ol_item_{name}(const void *__p) {{",
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
        if analysis.extern_locals and reaches(name, analysis.graph, set(analysis.extern_locals)):
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


def build_host(clang: _clang.Tool, work: Path, source: str, options: list[str], language: str,
                analysis: Analysis) -> Compiled:
    text = host_source(source, analysis, language)
    path, out = work / f"host_{SOURCE_NAME[language]}", work / "kernel.so"
    path.write_text(text)
    driver = ["--driver-mode=g++", "-fno-exceptions"] if language == "c++" else []
    flags = ["-O3", *march_options(clang, options), "-fPIC"]
    includes = [f"-I{GPU_INCLUDE}", f"-I{INCLUDE}"]
    log = None
    regions, _ = _with_regions(clang, work, path, [clang.path, *driver, "-x", language, *flags, *includes, *options],
                               analysis, language, options)
    if regions is not None:  # the region path's code is offloadrt's: if it fails to build, fibers
        try:
            log = _clang.run([clang.path, *driver, "-x", _PREPROCESSED[language], *flags, "-shared", "-Wl,-z,defs",
                              *_compile_options(options), str(regions), "-o", str(out)],
                             "compiling the portable source for the host")
        except OffloadError:
            log = None
    if log is None:
        log = _build([clang.path, *driver, "-x", language, *flags, "-shared", "-Wl,-z,defs", *includes, *options],
                     path, out, work)
    kernels = {kernel.name: analysis.signatures[kernel.name] for kernel in analysis.info.kernels}
    return Compiled(out.read_bytes(), kernels, {}, log)


def _build(command: list[str], path: Path, out: Path, work: Path) -> str:
    try:
        return _clang.run([*command, str(path), "-o", str(out), *build_depends(work)],
                          "compiling the portable source for the host")
    except OffloadError as exc:
        if exc.code == ErrorCode.COMPILE_FAILURE and f"{WRAPPER_NAME}:" in exc.details:
            raise OffloadError(ErrorCode.COMPILE_FAILURE, exc.details + WRAPPER_HINT) from None
        raise


def _compile_options(options: Sequence[str]) -> list[str]:
    """The options without the include folders (clang warns that they are unused on preprocessed input)."""
    kept: list[str] = []
    skip = False
    for option in options:
        if skip:
            skip = False
        elif option in _INCLUDE_OPTIONS:
            skip = True
        elif not option.startswith(_INCLUDE_OPTIONS):
            kept.append(option)
    return kept


def _with_regions(clang: _clang.Tool, work: Path, path: Path, command: list[str], analysis: Analysis,
                  language: str, options: Sequence[str]) -> tuple[Path | None, dict[str, str]]:
    """The translation unit at ``path`` preprocessed by ``command`` (the build's, writing the build's
    ``-MD`` file), with the eligible barrier kernels run as work-group regions (_regions.py), and each
    fiber kernel's path; None for the file where no kernel takes that path."""
    fibers = {kernel.name: len(kernel.params or ()) for kernel in analysis.info.kernels
              if needs_fibers(kernel.name, analysis.graph)}
    if not fibers or FIBERS_OPTION in options or any(option.startswith(_NO_REGIONS_OPTIONS) for option in options):
        return None, {name: "fibers" for name in fibers}
    preprocessed = work / "host_regions.i"
    try:
        _clang.run([*command, "-E", str(path), "-o", str(preprocessed), *build_depends(work)],
                   "preprocessing the portable source for the host")
        at = command.index("-x")
        shown = subprocess.run([*command[:at], "-x", _PREPROCESSED[language], *_compile_options(command[at + 2:]),
                                "-fsyntax-only", "-Xclang", "-ast-dump=json", str(preprocessed)],
                               capture_output=True, text=True, timeout=300, check=False)
        ast = json.loads(shown.stdout) if shown.returncode == 0 else None
    except (OffloadError, OSError, subprocess.SubprocessError, ValueError, RecursionError):
        ast = None
    if not isinstance(ast, dict):
        return None, {name: "fibers: the source's syntax tree could not be read" for name in fibers}
    text, paths = _regions.rewrite(preprocessed.read_text(errors="replace"), ast, fibers, analysis.graph,
                                   language == "c++")
    if all(path != "regions" for path in paths.values()):
        return None, paths
    preprocessed.write_text(text)
    return preprocessed, paths


def kernel_paths(source: str, lang: str = "gpu-c", options: Sequence[str] = ()) -> dict[str, str]:
    """How the host runs each kernel of a portable source: ``"loop"``, ``"regions"``, or ``"fibers"``
    (``"fibers: <why not regions>"``), as :func:`build_host` would build it (nothing is built)."""
    import tempfile

    from . import _analysis
    language = {"gpu-c": "c", "gpu-c++": "c++"}[lang]
    clang = _clang.clang()
    with tempfile.TemporaryDirectory(prefix="offloadrt-portable-") as folder:
        work = Path(folder)
        analysis = _analysis.analyse(clang, work, source, [*march_options(clang, options), *options], language)
        path = work / f"host_{SOURCE_NAME[language]}"
        path.write_text(host_source(source, analysis, language))
        driver = ["--driver-mode=g++", "-fno-exceptions"] if language == "c++" else []
        command = [clang.path, *driver, "-x", language, "-O3", *march_options(clang, options), "-fPIC",
                   f"-I{GPU_INCLUDE}", f"-I{INCLUDE}", *options]
        _, paths = _with_regions(clang, work, path, command, analysis, language, options)
    return {kernel.name: paths.get(kernel.name, "loop") for kernel in analysis.info.kernels}
