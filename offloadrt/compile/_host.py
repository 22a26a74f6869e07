"""Host C kernels (``lang="c"``): the host kernel ABI of ``offloadrt/host_kernel.h``, built with the system ``cc``.

The source is compiled as one C file into a shared object (``cc -shared -fPIC -O2 -I<offloadrt
include> <options> kernel.c``), in the current directory (``-Iinclude`` is ``./include``); options
come after offloadrt's own, so ``-O3`` or ``-std=c17`` win. ``-MD`` tells what the compiler read,
for the cache. A kernel is a function declared ``OL_HOST_KERNEL name(const void *args, const
ol_host_launch_t *launch)``; its signature comes from ``OL_HOST_KERNEL_ARGS(name, struct ...)``:
the struct's members, in order, are the parameters (``OL_HOST_KERNEL_NO_ARGS``: none). A kernel
without either has no signature (pass a packed blob, or set ``Kernel.signature``).
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from . import _inputs, _signature, _tools
from ._types import Compiled, Inputs, Target

BASE_FLAGS = ("-shared", "-fPIC", "-O2")


def include_dir() -> str:
    return str(Path(__file__).resolve().parent.parent / "include")


def toolchain_identity(target: Target) -> str:
    """The C compiler (``$CC`` or ``cc``) with its version, for the cache key."""
    return _tools.identity(_tools.find_c_compiler())


def kernels_of(source: str) -> dict[str, tuple[Any, ...] | None]:
    """Every ``OL_HOST_KERNEL`` of the source, with the signature its ``OL_HOST_KERNEL_ARGS`` declares
    (None where there is none or its struct cannot be laid out)."""
    body = _signature.clean(source)
    found: dict[str, tuple[Any, ...] | None] = {
        match.group(1): None for match in re.finditer(r"\bOL_HOST_KERNEL\s+(\w+)\s*\(", body)}
    declared = _signature.host_abi_kernels(source)
    for name, sig in declared.items():
        found[name] = sig
    return found


def compile_host_c(source: str, options: Sequence[str], name: str) -> Compiled:
    """Build ``source`` into a host shared object; ``COMPILE_FAILURE`` holds the compiler's whole log."""
    compiler = _tools.find_c_compiler()
    with tempfile.TemporaryDirectory(prefix="offloadrt-cc-") as work:
        try:
            cwd = os.getcwd()  # relative paths in the options mean what they mean to `cc` run here
        except OSError:
            cwd = work
        source_path = Path(work) / f"{name}.c"
        source_path.write_text(source, encoding="utf-8")
        output, depends = Path(work) / f"{name}.so", Path(work) / f"{name}.d"
        command = [*compiler, *BASE_FLAGS, "-I", include_dir(), *options, str(source_path), "-o", str(output),
                   "-MD", "-MF", str(depends)]
        log = _tools.run(command, f"compiling host C kernel source {name}.c", cwd)
        image = output.read_bytes()
        try:
            make = _inputs.from_make(depends.read_text(errors="replace"), cwd, work)
            inputs: Inputs | None = _inputs.reported(make, source, cwd, options)
        except OSError:
            inputs = None  # a compiler without -MD: what it read is unknown (not cached)
    return Compiled(image, kernels_of(source), {}, log, inputs)
