"""Where offloadrt and LLVM 22's liboffload answer differently, and why.

``EXPECTED_DIVERGENCES``: documented, deliberate differences. Each entry pins what both sides do
(one expectation per step: a literal outcome, or a compiled pattern it must fully match), so a
change on either side fails the case. An entry whose sides come to agree fails as stale, unless
``may_agree`` says they can agree on some machines (values read from the hardware).

``PENDING_FIXES``: differences that are offloadrt bugs: offloadrt should answer as liboffload
does. Their cases run as strict xfails, so they turn red once fixed; then delete the entry.

Any difference listed in neither table fails.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

Expect = str | re.Pattern[str]


@dataclass(frozen=True)
class Divergence:
    case: str
    liboffload: tuple[Expect, ...]
    offloadrt: tuple[Expect, ...]
    why: str
    may_agree: bool = False


@dataclass(frozen=True)
class PendingFix:
    case: str
    liboffload: str
    offloadrt: str
    why: str


def matches(expected: tuple[Expect, ...], outcomes: list[str]) -> bool:
    if len(expected) != len(outcomes):
        return False
    return all(e.fullmatch(o) is not None if isinstance(e, re.Pattern) else e == o
               for e, o in zip(expected, outcomes))


rx = re.compile
CRASH = "crash(SIGSEGV)"
ANY_STRING = rx(r"SUCCESS '.+'")
POSITIVE = rx(r"SUCCESS [1-9][0-9]*")

# Why the virtual host device crashes: LLVM 22 models the host as a device without a plugin
# device behind it (its GenericDeviceTy is NULL), usable only as the host side of olMemcpy; any
# entry point that reaches the plugin device through it dereferences NULL.
VIRTUAL_HOST = ("liboffload 22's virtual host device has no plugin device behind it, so the call dereferences "
                "NULL and the process dies; offloadrt's host device is a real CPU backend")
HOST_VALUES = ("liboffload's virtual host device reports fixed placeholder values; offloadrt's host device "
               "reports the machine's CPU (api-contract: the host platform is a real plugin)")


def _info_value(prop: str, liboffload: Expect, offloadrt: Expect, why: str, may_agree: bool = False) -> Divergence:
    return Divergence(f"olGetDeviceInfo.host.{prop}.value", (liboffload,), (offloadrt,), why, may_agree)


EXPECTED_DIVERGENCES: tuple[Divergence, ...] = (
    # -- the host platform and device: names, versions and numbers are each implementation's own ------
    Divergence("olGetPlatformInfo.host.NAME.value", ("SUCCESS 'Host'",), ("SUCCESS 'host'",),
               "each names its host platform after its plugin: liboffload 'Host', offloadrt's plugin 'host'"),
    Divergence("olGetPlatformInfo.host.VENDOR_NAME.value", ("SUCCESS 'Unknown platform vendor'",),
               ("SUCCESS 'offloadrt'",), "liboffload has no vendor for its host platform; offloadrt names itself"),
    Divergence("olGetPlatformInfo.host.VERSION.value", ("SUCCESS 'v0.0.1'",), (rx(r"SUCCESS '\d+\.\d+\.\d+.*'"),),
               "liboffload reports its API version as v0.0.1; offloadrt's host plugin reports offloadrt's version"),
    _info_value("NAME", "SUCCESS 'Virtual Host Device'", ANY_STRING, HOST_VALUES + " (the CPU model)"),
    _info_value("PRODUCT_NAME", "SUCCESS 'Virtual Host Device'", ANY_STRING, HOST_VALUES + " (the CPU model)"),
    _info_value("UID", "SUCCESS 'HOST'", rx(r"SUCCESS 'host-.+'"),
                HOST_VALUES + " (a stable per-machine identifier)"),
    _info_value("VENDOR", "SUCCESS 'Liboffload'", ANY_STRING, HOST_VALUES + " (the CPU vendor)"),
    _info_value("DRIVER_VERSION", rx(r"SUCCESS '22\.\d+\.\d+.*'"), rx(r"SUCCESS 'offloadrt .+'"),
                "liboffload reports the LLVM version; offloadrt its own version and the kernel's"),
    _info_value("MAX_WORK_GROUP_SIZE", "SUCCESS 1", "SUCCESS 4294967295",
                "liboffload's virtual host device runs no kernels (1 work-item); an offloadrt host work-group is "
                "one call on one thread that loops over its items, so any size fits"),
    _info_value("MAX_WORK_GROUP_SIZE_PER_DIMENSION", "SUCCESS {1, 1, 1}",
                "SUCCESS {4294967295, 4294967295, 4294967295}", "as MAX_WORK_GROUP_SIZE, per dimension"),
    _info_value("VENDOR_ID", "SUCCESS 0", rx(r"SUCCESS [0-9]+"), HOST_VALUES + " (the CPU vendor's PCI id)",
                may_agree=True),
    _info_value("NUM_COMPUTE_UNITS", "SUCCESS 1", POSITIVE, HOST_VALUES + " (the usable CPU cores)", may_agree=True),
    _info_value("MAX_CLOCK_FREQUENCY", "SUCCESS 64", POSITIVE, HOST_VALUES + " (the CPU clock in MHz)",
                may_agree=True),
    _info_value("MEMORY_CLOCK_RATE", "SUCCESS 64", rx(r"SUCCESS [1-9][0-9]*|UNIMPLEMENTED"),
                HOST_VALUES + "; offloadrt reads SMBIOS memory-device records and answers UNIMPLEMENTED "
                "where the machine exposes none rather than invent a rate", may_agree=True),
    Divergence("olGetDeviceInfo.host.MEMORY_CLOCK_RATE.shape", ("SUCCESS 4", "SUCCESS integer"),
               (rx("SUCCESS 4|UNIMPLEMENTED"), rx("SUCCESS integer|UNIMPLEMENTED")),
               "without SMBIOS memory records offloadrt does not support the property (see its .value case); "
               "where it does, size and kind match", may_agree=True),
    _info_value("MAX_MEM_ALLOC_SIZE", "SUCCESS 0", POSITIVE, HOST_VALUES + " (physical memory)"),
    _info_value("GLOBAL_MEM_SIZE", "SUCCESS 0", POSITIVE, HOST_VALUES + " (physical memory)"),
    _info_value("WORK_GROUP_LOCAL_MEM_SIZE", "SUCCESS 0", POSITIVE,
                HOST_VALUES + " (a work-group's local memory is a per-thread buffer sized from the cache)"),
    *[_info_value(f"NATIVE_VECTOR_WIDTH_{t}", "SUCCESS 1", POSITIVE,
                  HOST_VALUES + " (SIMD lanes of that type)", may_agree=True)
      for t in ("CHAR", "SHORT", "INT", "LONG", "FLOAT", "DOUBLE")],

    # -- calls that crash liboffload on its virtual host device: offloadrt answers them properly ---------
    *[Divergence(f"olMemAlloc.host.{t}", (CRASH,),
                 ("SUCCESS <new>", "SUCCESS 64", f"SUCCESS {t}", "SUCCESS HOST", "SUCCESS a", "SUCCESS 4", "SUCCESS",
                  "INVALID_ARGUMENT", "NOT_FOUND"),
                 VIRTUAL_HOST + ": offloadrt allocates; olGetMemInfo answers from inside the allocation; the second "
                 "olMemFree is INVALID_ARGUMENT (as LLVM 22 for an unknown address) and the freed address is "
                 "NOT_FOUND") for t in ("HOST", "DEVICE", "MANAGED")],
    Divergence("olMemAlloc.invalid_type", (CRASH,), ("INVALID_ENUMERATION",),
               VIRTUAL_HOST + ": liboffload reaches the device before looking at the type; offloadrt rejects the "
               "type (contract rule 6)"),
    Divergence("olMemFree.interior_address", (CRASH,), ("SUCCESS <new>", "INVALID_ARGUMENT", "SUCCESS"),
               VIRTUAL_HOST + " (at olMemAlloc); offloadrt refuses an interior address with INVALID_ARGUMENT, "
               "as LLVM 22 refuses any address that is not an allocation's base, and frees nothing"),
    Divergence("olMemRegister.host", (CRASH,), ("SUCCESS buf", "SUCCESS"),
               VIRTUAL_HOST + "; on offloadrt's host device registering host memory returns the same address"),
    Divergence("olMemRegister.twice", (CRASH,),
               ("SUCCESS buf", "SUCCESS buf", "SUCCESS", "SUCCESS", "INVALID_ARGUMENT"),
               VIRTUAL_HOST + "; offloadrt counts a second registration of the range as a second user "
               "(upstream SuccessMultipleRegister): two unregisters succeed, a third is INVALID_ARGUMENT"),
    Divergence("olMemRegister.inside_registered", (CRASH,), ("SUCCESS buf", "SUCCESS buf+8"),
               VIRTUAL_HOST + "; a range inside a registered one adds a user (header: 'a new user will be "
               "registered')"),
    Divergence("olMemRegister.partial_overlap", (CRASH,), ("SUCCESS buf", "INVALID_ARGUMENT"),
               VIRTUAL_HOST + "; offloadrt refuses a partial overlap with INVALID_ARGUMENT (header: 'A partial "
               "overlapping is not allowed'; upstream PartialOverlapPtrRegister)"),
    Divergence("olMemRegister.flags", (CRASH,), ("SUCCESS buf",),
               VIRTUAL_HOST + "; flags are reserved in LLVM 22 and offloadrt accepts any 32-bit value"),
    Divergence("olMemUnregister.unregistered", (CRASH,), ("INVALID_ARGUMENT",),
               VIRTUAL_HOST + "; offloadrt refuses memory that is not registered with INVALID_ARGUMENT "
               "(upstream UnregisteredPtrUnRegister)"),
    Divergence("olMemFill.host_buffer_no_queue", (CRASH,), ("SUCCESS", "SUCCESS b'abababab\\x00\\x00'"),
               "liboffload 22 dereferences the optional Queue, so a fill without one crashes; docs/api.md makes "
               "the queue optional (the fill is done when the call returns, on plain host memory by the host "
               "device)"),
    Divergence("olMemFill.empty_pattern", ("crash(SIGFPE)",), ("INVALID_SIZE",),
               "liboffload's validation computes FillSize % PatternSize with PatternSize 0 and dies of a division "
               "by zero; offloadrt refuses an empty pattern with INVALID_SIZE"),
    Divergence("olCreateQueue.host", (CRASH,),
               ("SUCCESS <new>", "SUCCESS HOST", "SUCCESS 1", "SUCCESS", "SUCCESS <new>", "SUCCESS", "SUCCESS q",
                "SUCCESS true", "SUCCESS", "SUCCESS", "SUCCESS true", "SUCCESS", "INVALID_EVENT", "SUCCESS",
                "INVALID_QUEUE", "INVALID_QUEUE"),
               VIRTUAL_HOST + "; offloadrt's host queues run work in order on a thread, and handles used after "
               "their destroy call are INVALID_EVENT / INVALID_QUEUE instead of a crash (contract rule 4)"),
    Divergence("olCreateProgram.host_elf", (CRASH,),
               ("SUCCESS <new>", "SUCCESS <new>", "SUCCESS KERNEL", "SYMBOL_KIND", "SUCCESS <new>", "SUCCESS 16",
                "SUCCESS 8", "NOT_FOUND", "SUCCESS", "SYMBOL_KIND", "SYMBOL_KIND", "SUCCESS b'\\x01\\x00\\x00\\x00'",
                "SUCCESS", "INVALID_ARGUMENT", "INVALID_ARGUMENT"),
               VIRTUAL_HOST + "; offloadrt's host device loads ELF shared objects: the kernel runs, a global "
               "variable's size and address are reported, a kernel-only or variable-only query on the wrong kind "
               "is SYMBOL_KIND, and a destroyed program (and its symbols) are INVALID_ARGUMENT (contract rule 4)"),
    Divergence("olCreateProgram.not_an_image", (CRASH,), ("INVALID_BINARY",),
               VIRTUAL_HOST + "; offloadrt checks the image and refuses it with INVALID_BINARY"),
    Divergence("olCreateProgram.empty_image", (CRASH,), ("INVALID_BINARY",),
               VIRTUAL_HOST + "; offloadrt refuses an empty image with INVALID_BINARY"),
    Divergence("olIsValidBinary.host_elf", ("SUCCESS false",), ("SUCCESS true",),
               "liboffload's virtual host device loads no programs; offloadrt's host device runs ELF shared "
               "objects built for this machine (api-contract: host kernels)"),
)

PENDING_FIXES: tuple[PendingFix, ...] = ()

DIVERGENCES_BY_CASE = {d.case: d for d in EXPECTED_DIVERGENCES}
PENDING_BY_CASE = {p.case: p for p in PENDING_FIXES}
assert len(DIVERGENCES_BY_CASE) == len(EXPECTED_DIVERGENCES) and len(PENDING_BY_CASE) == len(PENDING_FIXES)
