"""The one table of differential cases: every case runs on offloadrt and on LLVM 22's liboffload.

Each case is a call sequence in the neutral form of ``neutral.py``. The table covers every entry
point of LLVM 22's ``OffloadAPI.h`` (35), each rule of the header's ``@returns`` lists that Python
can express (``HEADER_RULES`` names them all; ``NOT_COMPARABLE`` says why the others cannot be
compared), coinciding mistakes, init/shutdown nesting, the info values and sizes of the host
device, host-to-host ``olMemcpy`` and every ``...WithCodeLoc`` variant.

What cannot be compared, once:

- NULL *output* pointers (``NULL == AllocationOut``, ``PropValue``, ``PropSizeRet``, the output
  handles, ``Valid``, ``GroupSize``, ``PinnedPtr``): offloadrt returns outputs, so Python has no way
  to pass one. ``PropSize == 0`` and a too small ``PropSize`` likewise: Python takes no size.
- ``ArgumentsSize > 0 && ArgumentsData == NULL`` (olLaunchKernel): a Python blob carries its size.
- Anything that needs a queue, an event, a program, a symbol or an allocation made by liboffload:
  LLVM 22's virtual host device (the only device liboffload has without a GPU) crashes creating
  them (see the cases ``olCreateQueue.host``, ``olMemAlloc.host.*``, ``olCreateProgram.host_elf``),
  so those rules are only reachable through NULL handles here; the crashing cases still run, and
  record what offloadrt answers instead (an expected divergence each).
- A handle of the wrong type, or one used after its destroy call: C has no type to check, and
  liboffload cannot create the handles that could be destroyed (above).
"""

from __future__ import annotations

from .liboffload import ENUMS, FORCE_UINT32, INFO_TYPES
from .neutral import (
    HOST,
    NULL,
    PLATFORM,
    SHOW_CODE,
    SHOW_KIND,
    SIGNATURES,
    Blob,
    Call,
    Case,
    E,
    Events,
    HostFunction,
    Image,
    Iterate,
    Launch,
    Pattern,
    Ptr,
    Read,
    Ref,
    call,
)

# ---- the header's @returns rules ----------------------------------------------------------------
# Every condition listed under an error of an entry point's @returns (LLVM 22), plus UNINITIALIZED,
# which every entry point but olInit returns before olInit and after the last olShutDown.

OUTPUT_POINTER = "a NULL output pointer: offloadrt returns outputs, Python cannot pass one"
PROP_SIZE = "PropSize: offloadrt's info queries take no size (the value is returned whole)"
NEEDS_QUEUE = "needs a queue or event: liboffload 22 crashes creating a queue on its virtual host device"
NEEDS_PROGRAM = "needs a program or symbol: liboffload 22 crashes creating a program on its virtual host device"
ARGS_SIZE = "a Python argument blob carries its own size: there is no ArgumentsSize to mismatch"

HEADER_RULES: dict[str, tuple[str, ...]] = {
    "olCalculateOptimalOccupancy": ("UNINITIALIZED", "The provided symbol is not a kernel",
                                    "The backend cannot provide this information", "NULL == Device",
                                    "NULL == Kernel", "NULL == GroupSize"),
    "olCreateEvent": ("UNINITIALIZED", "NULL == Queue", "NULL == Event"),
    "olCreateProgram": ("UNINITIALIZED", "NULL == Device", "NULL == ProgData", "NULL == Program"),
    "olCreateQueue": ("UNINITIALIZED", "NULL == Device", "NULL == Queue"),
    "olDestroyEvent": ("UNINITIALIZED", "NULL == Event"),
    "olDestroyProgram": ("UNINITIALIZED", "NULL == Program"),
    "olDestroyQueue": ("UNINITIALIZED", "NULL == Queue"),
    "olGetDeviceInfo": ("UNINITIALIZED", "PropName is not supported by the device", "PropSize == 0",
                        "PropSize is less than the real number of bytes", "NULL == Device", "NULL == PropValue"),
    "olGetDeviceInfoSize": ("UNINITIALIZED", "PropName is not supported by the device", "NULL == Device",
                            "NULL == PropSizeRet"),
    "olGetEventInfo": ("UNINITIALIZED", "PropSize == 0", "PropSize is less than the real number of bytes",
                       "NULL == Event", "NULL == PropValue"),
    "olGetEventInfoSize": ("UNINITIALIZED", "NULL == Event", "NULL == PropSizeRet"),
    "olGetMemInfo": ("UNINITIALIZED", "PropSize == 0", "PropSize is less than the real number of bytes",
                     "memory was not allocated by liboffload", "NULL == Ptr", "NULL == PropValue"),
    "olGetMemInfoSize": ("UNINITIALIZED", "memory was not allocated by liboffload", "NULL == Ptr",
                         "NULL == PropSizeRet"),
    "olGetPlatformInfo": ("UNINITIALIZED", "PropName is not supported by the platform", "PropSize == 0",
                          "PropSize is less than the real number of bytes", "NULL == Platform",
                          "NULL == PropValue"),
    "olGetPlatformInfoSize": ("UNINITIALIZED", "PropName is not supported by the platform", "NULL == Platform",
                              "NULL == PropSizeRet"),
    "olGetQueueInfo": ("UNINITIALIZED", "PropSize == 0", "PropSize is less than the real number of bytes",
                       "NULL == Queue", "NULL == PropValue"),
    "olGetQueueInfoSize": ("UNINITIALIZED", "NULL == Queue", "NULL == PropSizeRet"),
    "olGetSymbol": ("UNINITIALIZED", "NULL == Program", "NULL == Name", "NULL == Symbol"),
    "olGetSymbolInfo": ("UNINITIALIZED", "PropSize == 0", "PropSize is less than the real number of bytes",
                        "the requested info isn't applicable to the type of symbol", "NULL == Symbol",
                        "NULL == PropValue"),
    "olGetSymbolInfoSize": ("UNINITIALIZED", "the requested info isn't applicable to the type of symbol",
                            "NULL == Symbol", "NULL == PropSizeRet"),
    "olInit": ("each call increments a reference count that olShutDown decrements",),
    "olIsValidBinary": ("UNINITIALIZED", "NULL == Device", "NULL == ProgData", "NULL == Valid"),
    "olIterateDevices": ("UNINITIALIZED", "NULL == Callback"),
    "olLaunchHostFunction": ("UNINITIALIZED", "NULL == Queue", "NULL == Callback"),
    "olLaunchKernel": ("UNINITIALIZED", "ArgumentsSize > 0 && ArgumentsData == NULL",
                       "Queue is non-null but does not belong to Device", "The provided symbol is not a kernel",
                       "NULL == Device", "NULL == Kernel", "NULL == LaunchSizeArgs"),
    "olMemAlloc": ("UNINITIALIZED", "Size == 0", "NULL == Device", "NULL == AllocationOut"),
    "olMemFill": ("UNINITIALIZED", "FillSize % PatternSize != 0", "NULL == Ptr", "NULL == PatternPtr"),
    "olMemFree": ("UNINITIALIZED", "NULL == Address"),
    "olMemRegister": ("UNINITIALIZED", "Size == 0", "NULL == Device", "NULL == Ptr", "NULL == PinnedPtr"),
    "olMemUnregister": ("UNINITIALIZED", "NULL == Device", "NULL == Ptr"),
    "olMemcpy": ("UNINITIALIZED", "NULL == DstDevice", "NULL == SrcDevice", "NULL == DstPtr", "NULL == SrcPtr"),
    "olShutDown": ("UNINITIALIZED",),
    "olSyncEvent": ("UNINITIALIZED", "NULL == Event"),
    "olSyncQueue": ("UNINITIALIZED", "NULL == Queue"),
    "olWaitEvents": ("UNINITIALIZED", "Any event handle in the list is NULL", "NULL == Queue", "NULL == Events"),
}

NOT_COMPARABLE: dict[str, str] = {
    "olCalculateOptimalOccupancy: The provided symbol is not a kernel": NEEDS_PROGRAM,
    "olCalculateOptimalOccupancy: The backend cannot provide this information": NEEDS_PROGRAM,
    "olCalculateOptimalOccupancy: NULL == GroupSize": OUTPUT_POINTER,
    "olCreateEvent: NULL == Event": OUTPUT_POINTER,
    "olCreateProgram: NULL == Program": OUTPUT_POINTER,
    "olCreateQueue: NULL == Queue": OUTPUT_POINTER,
    "olGetDeviceInfo: PropSize == 0": PROP_SIZE,
    "olGetDeviceInfo: PropSize is less than the real number of bytes": PROP_SIZE,
    "olGetDeviceInfo: NULL == PropValue": OUTPUT_POINTER,
    "olGetDeviceInfoSize: NULL == PropSizeRet": OUTPUT_POINTER,
    "olGetEventInfo: PropSize == 0": PROP_SIZE,
    "olGetEventInfo: PropSize is less than the real number of bytes": PROP_SIZE,
    "olGetEventInfo: NULL == PropValue": OUTPUT_POINTER,
    "olGetEventInfoSize: NULL == PropSizeRet": OUTPUT_POINTER,
    "olGetMemInfo: PropSize == 0": PROP_SIZE,
    "olGetMemInfo: PropSize is less than the real number of bytes": PROP_SIZE,
    "olGetMemInfo: NULL == PropValue": OUTPUT_POINTER,
    "olGetMemInfoSize: NULL == PropSizeRet": OUTPUT_POINTER,
    "olGetPlatformInfo: PropSize == 0": PROP_SIZE,
    "olGetPlatformInfo: PropSize is less than the real number of bytes": PROP_SIZE,
    "olGetPlatformInfo: NULL == PropValue": OUTPUT_POINTER,
    "olGetPlatformInfoSize: NULL == PropSizeRet": OUTPUT_POINTER,
    "olGetQueueInfo: PropSize == 0": PROP_SIZE,
    "olGetQueueInfo: PropSize is less than the real number of bytes": PROP_SIZE,
    "olGetQueueInfo: NULL == PropValue": OUTPUT_POINTER,
    "olGetQueueInfoSize: NULL == PropSizeRet": OUTPUT_POINTER,
    "olGetSymbol: NULL == Name": NEEDS_PROGRAM + " (a NULL program is reported first)",
    "olGetSymbol: NULL == Symbol": OUTPUT_POINTER,
    "olGetSymbolInfo: PropSize == 0": PROP_SIZE,
    "olGetSymbolInfo: PropSize is less than the real number of bytes": PROP_SIZE,
    "olGetSymbolInfo: the requested info isn't applicable to the type of symbol": NEEDS_PROGRAM,
    "olGetSymbolInfo: NULL == PropValue": OUTPUT_POINTER,
    "olGetSymbolInfoSize: the requested info isn't applicable to the type of symbol": NEEDS_PROGRAM,
    "olGetSymbolInfoSize: NULL == PropSizeRet": OUTPUT_POINTER,
    "olIsValidBinary: NULL == Valid": OUTPUT_POINTER,
    "olLaunchHostFunction: NULL == Callback": NEEDS_QUEUE + " (a NULL queue is reported first)",
    "olLaunchKernel: ArgumentsSize > 0 && ArgumentsData == NULL": ARGS_SIZE,
    "olLaunchKernel: Queue is non-null but does not belong to Device": NEEDS_QUEUE,
    "olLaunchKernel: The provided symbol is not a kernel": NEEDS_PROGRAM,
    "olLaunchKernel: NULL == LaunchSizeArgs": NEEDS_PROGRAM + " (a NULL kernel is reported first)",
    "olMemAlloc: NULL == AllocationOut": OUTPUT_POINTER,
    "olMemRegister: NULL == PinnedPtr": OUTPUT_POINTER,
    "olWaitEvents: NULL == Events": NEEDS_QUEUE + " (a NULL queue is reported first)",
}

# ---- building blocks ----------------------------------------------------------------------------

BAD = FORCE_UINT32  # an enumeration value no enum has
DEVICE = E("AllocType", "DEVICE")
KERNEL = E("SymbolKind", "KERNEL")
GLOBAL = E("SymbolKind", "GLOBAL_VARIABLE")
ELF = Image(resource="elf")  # the test program (tests/differential/program.c), built with cc


def _null_args(fn: str) -> tuple[object, ...]:
    """Every argument NULL, zero or an invalid enumeration: the most wrong call there is."""
    zero = {"size": 0, "flags": 0}
    return tuple(zero.get(kind, BAD if kind.startswith("enum:") else NULL) for kind in SIGNATURES[fn].params)


def _uninitialised(fn: str) -> Case:
    return Case(f"{fn}.before_init", (Call(fn, _null_args(fn)),), init=False, checks=(f"{fn}: UNINITIALIZED",))


def _with_code_location(fn: str) -> Case:
    return Case(f"{fn}.null_arguments.WithCodeLoc", (Call(fn, _null_args(fn), loc=True),))


def _one(name: str, *steps: Call | Read, checks: tuple[str, ...] = (), **buffers: bytes | int) -> Case:
    return Case(name, tuple(steps), dict(buffers), checks=checks)


def _info_cases(fn: str, handle: object, where: str) -> list[Case]:
    """Per property of ``fn``'s family on ``handle``: its size and kind (``shape``) and its value.

    A string's size depends on its text, so for strings the shape shows the size query's code only."""
    family = SIGNATURES[fn].params[1][5:]
    cases = []
    for prop, c_type in INFO_TYPES[family].items():
        token = E(family, prop)
        size_show = SHOW_CODE if c_type == "string" else "value"
        cases.append(Case(f"{fn}.{where}.{prop}.shape", (
            call(f"{fn}Size", handle, token, show=size_show),
            call(fn, handle, token, show=SHOW_KIND))))
        cases.append(Case(f"{fn}.{where}.{prop}.value", (call(fn, handle, token),)))
    return cases


def _null_handle_info(fn: str, rule: str) -> list[Case]:
    """``fn`` and ``fnSize`` with a NULL handle, for every property and for invalid ones."""
    family = SIGNATURES[fn].params[1][5:]
    cases = []
    for query in (fn, f"{fn}Size"):
        for prop in ENUMS[family]:
            cases.append(Case(f"{query}.NULL_handle.{prop}", (call(query, NULL, E(family, prop)),),
                              checks=(f"{query}: {rule}",)))
        cases.append(Case(f"{query}.NULL_handle_invalid_enum", (call(query, NULL, BAD),),
                          checks=(f"{query}: {rule}",)))
    return cases


def _invalid_enums(fn: str, handle: object, rule: str) -> list[Case]:
    family = SIGNATURES[fn].params[1][5:]
    last = len(ENUMS[family])
    return [Case(f"{query}.invalid_enum.{label}", (call(query, handle, value),), checks=(f"{query}: {rule}",))
            for query in (fn, f"{fn}Size") for label, value in (("LAST", last), ("FORCE_UINT32", BAD))]


def _mem_info_unknown(query: str, pointer: object, where: str) -> list[Case]:
    return [Case(f"{query}.{where}.{prop}", (call(query, pointer, E("MemInfo", prop)),),
                 buffers={"buf": 64}, checks=(f"{query}: memory was not allocated by liboffload",))
            for prop in ENUMS["MemInfo"]]


def _alloc_and_query(alloc_type: str) -> Case:
    mem = E("MemInfo", "SIZE")
    return Case(f"olMemAlloc.host.{alloc_type}", (
        call("olMemAlloc", HOST, E("AllocType", alloc_type), 64, save="a"),
        call("olGetMemInfo", Ref("a"), mem),
        call("olGetMemInfo", Ref("a", 63), E("MemInfo", "TYPE")),
        call("olGetMemInfo", Ref("a"), E("MemInfo", "DEVICE")),
        call("olGetMemInfo", Ref("a", 8), E("MemInfo", "BASE")),
        call("olGetMemInfoSize", Ref("a"), E("MemInfo", "TYPE")),
        call("olMemFree", Ref("a")),
        call("olMemFree", Ref("a")),
        call("olGetMemInfo", Ref("a"), mem)))


# ---- the table ------------------------------------------------------------------------------------

CASES: tuple[Case, ...] = (
    # -- init and shutdown: reference counted, nested, re-initialisable --------------------------------
    *[_uninitialised(fn) for fn in SIGNATURES if fn != "olInit"],
    Case("olInit.nested_pairs", (
        call("olInit"), call("olInit"),
        call("olIterateDevices", Iterate(stop_after=1)),
        call("olShutDown"),
        call("olIterateDevices", Iterate(stop_after=1)),  # one user left: still initialised
        call("olShutDown"),
        call("olIterateDevices", Iterate(stop_after=1)),  # the last one is gone
        call("olShutDown")), init=False,
        checks=("olInit: each call increments a reference count that olShutDown decrements",
                "olShutDown: UNINITIALIZED", "olIterateDevices: UNINITIALIZED")),
    Case("olInit.reinit_after_last_shutdown", (
        call("olInit"), call("olShutDown"), call("olInit"),
        call("olIterateDevices", Iterate(stop_after=1)),
        call("olGetDeviceInfo", HOST, E("DeviceInfo", "TYPE")),
        call("olShutDown")), init=False),
    Case("olInit.repeated", tuple(call(fn) for _ in range(10) for fn in ("olInit", "olShutDown")), init=False),
    Case("olInit.WithCodeLoc_nested", (
        call("olInit", loc=True), call("olInit", loc=True),
        call("olShutDown", loc=True), call("olShutDown", loc=True), call("olShutDown", loc=True)), init=False),
    Case("olShutDown.after_last_shutdown", (call("olInit"), call("olShutDown"), call("olShutDown")), init=False,
         checks=("olShutDown: UNINITIALIZED",)),
    Case("olShutDown.host_device_after_last_shutdown", (
        call("olGetDeviceInfo", HOST, E("DeviceInfo", "TYPE")),
        call("olGetPlatformInfo", PLATFORM, E("PlatformInfo", "BACKEND")),
        call("olShutDown"),
        call("olGetDeviceInfo", HOST, E("DeviceInfo", "TYPE")),
        call("olGetPlatformInfo", PLATFORM, E("PlatformInfo", "BACKEND"))),
        checks=("olGetDeviceInfo: UNINITIALIZED", "olGetPlatformInfo: UNINITIALIZED")),

    # -- every entry point's WithCodeLoc variant, with NULL/zero arguments ------------------------------
    *[_with_code_location(fn) for fn in SIGNATURES if fn not in ("olInit", "olShutDown")],

    # -- platform info on the host platform ---------------------------------------------------------
    *_null_handle_info("olGetPlatformInfo", "NULL == Platform"),
    *_invalid_enums("olGetPlatformInfo", PLATFORM, "PropName is not supported by the platform"),
    *_info_cases("olGetPlatformInfo", PLATFORM, "host"),

    # -- devices ------------------------------------------------------------------------------------
    _one("olIterateDevices.NULL_callback", call("olIterateDevices", NULL),
         checks=("olIterateDevices: NULL == Callback",)),
    _one("olIterateDevices.all", call("olIterateDevices", Iterate())),
    _one("olIterateDevices.stop_after_first", call("olIterateDevices", Iterate(stop_after=1))),
    *_null_handle_info("olGetDeviceInfo", "NULL == Device"),
    *_invalid_enums("olGetDeviceInfo", HOST, "PropName is not supported by the device"),
    *_info_cases("olGetDeviceInfo", HOST, "host"),

    # -- olMemAlloc / olMemFree -----------------------------------------------------------------------
    *[_alloc_and_query(t) for t in ENUMS["AllocType"]],
    _one("olMemAlloc.size_zero", call("olMemAlloc", HOST, DEVICE, 0), checks=("olMemAlloc: Size == 0",)),
    _one("olMemAlloc.NULL_device", call("olMemAlloc", NULL, DEVICE, 64), checks=("olMemAlloc: NULL == Device",)),
    _one("olMemAlloc.size_zero_NULL_device", call("olMemAlloc", NULL, DEVICE, 0),
         checks=("olMemAlloc: Size == 0", "olMemAlloc: NULL == Device")),
    _one("olMemAlloc.invalid_type", call("olMemAlloc", HOST, BAD, 64)),
    _one("olMemAlloc.invalid_type_NULL_device", call("olMemAlloc", NULL, BAD, 64)),
    _one("olMemAlloc.invalid_type_size_zero", call("olMemAlloc", HOST, BAD, 0)),
    _one("olMemFree.NULL", call("olMemFree", NULL), checks=("olMemFree: NULL == Address",)),
    _one("olMemFree.zero", call("olMemFree", 0), checks=("olMemFree: NULL == Address",)),
    _one("olMemFree.unknown_host_buffer", call("olMemFree", Ptr("buf")), buf=64),
    _one("olMemFree.unknown_address", call("olMemFree", 0x1234)),
    _one("olMemFree.interior_address", call("olMemAlloc", HOST, DEVICE, 64, save="a"),
         call("olMemFree", Ref("a", 8)), call("olMemFree", Ref("a"))),

    # -- olMemRegister / olMemUnregister (upstream memory/olMemRegister.cpp, and the header's rules) -----
    _one("olMemRegister.host", call("olMemRegister", HOST, Ptr("buf"), 64, 0),
         call("olMemUnregister", HOST, Ptr("buf")), buf=64),
    _one("olMemRegister.twice", call("olMemRegister", HOST, Ptr("buf"), 64, 0),
         call("olMemRegister", HOST, Ptr("buf"), 64, 0), call("olMemUnregister", HOST, Ptr("buf")),
         call("olMemUnregister", HOST, Ptr("buf")), call("olMemUnregister", HOST, Ptr("buf")), buf=64),
    _one("olMemRegister.inside_registered", call("olMemRegister", HOST, Ptr("buf"), 64, 0),
         call("olMemRegister", HOST, Ptr("buf", 8), 16, 0), buf=64),
    _one("olMemRegister.partial_overlap", call("olMemRegister", HOST, Ptr("buf"), 32, 0),
         call("olMemRegister", HOST, Ptr("buf", 2), 32, 0), buf=64),
    _one("olMemRegister.flags", call("olMemRegister", HOST, Ptr("buf"), 64, 1), buf=64),
    _one("olMemRegister.size_zero", call("olMemRegister", HOST, Ptr("buf"), 0, 0), buf=64,
         checks=("olMemRegister: Size == 0",)),
    _one("olMemRegister.NULL_device", call("olMemRegister", NULL, Ptr("buf"), 64, 0), buf=64,
         checks=("olMemRegister: NULL == Device",)),
    _one("olMemRegister.NULL_ptr", call("olMemRegister", HOST, NULL, 64, 0), checks=("olMemRegister: NULL == Ptr",)),
    _one("olMemRegister.zero_ptr", call("olMemRegister", HOST, 0, 64, 0), checks=("olMemRegister: NULL == Ptr",)),
    _one("olMemRegister.size_zero_NULL_device", call("olMemRegister", NULL, Ptr("buf"), 0, 0), buf=64),
    _one("olMemRegister.size_zero_NULL_ptr", call("olMemRegister", HOST, NULL, 0, 0)),
    _one("olMemRegister.NULL_device_NULL_ptr", call("olMemRegister", NULL, NULL, 64, 0)),
    _one("olMemRegister.size_zero_NULL_device_NULL_ptr", call("olMemRegister", NULL, NULL, 0, 0)),
    _one("olMemUnregister.NULL_device", call("olMemUnregister", NULL, Ptr("buf")), buf=64,
         checks=("olMemUnregister: NULL == Device",)),
    _one("olMemUnregister.NULL_ptr", call("olMemUnregister", HOST, NULL), checks=("olMemUnregister: NULL == Ptr",)),
    _one("olMemUnregister.NULL_device_NULL_ptr", call("olMemUnregister", NULL, NULL)),
    _one("olMemUnregister.unregistered", call("olMemUnregister", HOST, Ptr("buf")), buf=64),

    # -- olGetMemInfo / olGetMemInfoSize ----------------------------------------------------------------
    *[Case(f"{query}.{label}", (call(query, null, E("MemInfo", "SIZE")),), checks=(f"{query}: NULL == Ptr",))
      for query in ("olGetMemInfo", "olGetMemInfoSize") for label, null in (("NULL", NULL), ("zero", 0))],
    *[case for query in ("olGetMemInfo", "olGetMemInfoSize")
      for case in _mem_info_unknown(query, Ptr("buf", 5), "unknown_host_buffer")],
    *[Case(f"{query}.unknown_address", (call(query, 0x1234, E("MemInfo", "BASE")),),
           checks=(f"{query}: memory was not allocated by liboffload",))
      for query in ("olGetMemInfo", "olGetMemInfoSize")],
    *[Case(f"{query}.unknown_address_invalid_enum", (call(query, Ptr("buf"), BAD),), buffers={"buf": 64})
      for query in ("olGetMemInfo", "olGetMemInfoSize")],
    *[Case(f"{query}.NULL_invalid_enum", (call(query, NULL, BAD),)) for query in ("olGetMemInfo", "olGetMemInfoSize")],

    # -- olMemcpy between plain host buffers -----------------------------------------------------------
    _one("olMemcpy.host_to_host", call("olMemcpy", NULL, Ptr("dst"), HOST, Ptr("src"), HOST, 12), Read("dst"),
         src=b"differential", dst=16),
    _one("olMemcpy.host_to_host_offsets", call("olMemcpy", NULL, Ptr("dst", 3), HOST, Ptr("src", 2), HOST, 5),
         Read("dst"), src=b"differential", dst=10),
    _one("olMemcpy.host_to_host_size_zero", call("olMemcpy", NULL, Ptr("dst"), HOST, Ptr("src"), HOST, 0),
         Read("dst"), src=b"abcd", dst=4),
    _one("olMemcpy.host_to_host_twice", call("olMemcpy", NULL, Ptr("dst"), HOST, Ptr("src"), HOST, 4),
         call("olMemcpy", NULL, Ptr("dst", 4), HOST, Ptr("dst"), HOST, 4), Read("dst"), src=b"abcd", dst=8),
    _one("olMemcpy.NULL_dst", call("olMemcpy", NULL, NULL, HOST, Ptr("src"), HOST, 4), src=4,
         checks=("olMemcpy: NULL == DstPtr",)),
    _one("olMemcpy.NULL_src", call("olMemcpy", NULL, Ptr("dst"), HOST, NULL, HOST, 4), dst=4,
         checks=("olMemcpy: NULL == SrcPtr",)),
    _one("olMemcpy.NULL_dst_device", call("olMemcpy", NULL, Ptr("dst"), NULL, Ptr("src"), HOST, 4), src=4, dst=4,
         checks=("olMemcpy: NULL == DstDevice",)),
    _one("olMemcpy.NULL_src_device", call("olMemcpy", NULL, Ptr("dst"), HOST, Ptr("src"), NULL, 4), src=4, dst=4,
         checks=("olMemcpy: NULL == SrcDevice",)),
    _one("olMemcpy.NULL_dst_NULL_src_device", call("olMemcpy", NULL, NULL, HOST, Ptr("src"), NULL, 4), src=4),
    _one("olMemcpy.NULL_src_NULL_dst_device", call("olMemcpy", NULL, Ptr("dst"), NULL, NULL, HOST, 4), dst=4),
    _one("olMemcpy.NULL_pointers_size_zero", call("olMemcpy", NULL, NULL, HOST, NULL, HOST, 0)),

    # -- olMemFill ----------------------------------------------------------------------------------
    _one("olMemFill.host_buffer_no_queue", call("olMemFill", NULL, Ptr("buf"), Pattern(b"ab"), 8), Read("buf"),
         buf=10),
    _one("olMemFill.size_not_a_multiple", call("olMemFill", NULL, Ptr("buf"), Pattern(b"ab"), 7), buf=8,
         checks=("olMemFill: FillSize % PatternSize != 0",)),
    _one("olMemFill.NULL_ptr", call("olMemFill", NULL, NULL, Pattern(b"ab"), 8), checks=("olMemFill: NULL == Ptr",)),
    _one("olMemFill.NULL_pattern", call("olMemFill", NULL, Ptr("buf"), NULL, 8), buf=8,
         checks=("olMemFill: NULL == PatternPtr",)),
    _one("olMemFill.size_not_a_multiple_NULL_ptr", call("olMemFill", NULL, NULL, Pattern(b"ab"), 7)),
    _one("olMemFill.NULL_ptr_NULL_pattern", call("olMemFill", NULL, NULL, NULL, 8)),
    _one("olMemFill.empty_pattern", call("olMemFill", NULL, Ptr("buf"), Pattern(b""), 8), buf=8),

    # -- queues and events ------------------------------------------------------------------------------
    _one("olCreateQueue.host", call("olCreateQueue", HOST, save="q"),
         call("olGetQueueInfo", Ref("q"), E("QueueInfo", "DEVICE")),
         call("olGetQueueInfoSize", Ref("q"), E("QueueInfo", "EMPTY")),
         call("olLaunchHostFunction", Ref("q"), HostFunction()),
         call("olCreateEvent", Ref("q"), save="e"),
         call("olSyncEvent", Ref("e")),
         call("olGetEventInfo", Ref("e"), E("EventInfo", "QUEUE")),
         call("olGetEventInfo", Ref("e"), E("EventInfo", "IS_COMPLETE")),
         call("olWaitEvents", Ref("q"), Events((Ref("e"),))),
         call("olSyncQueue", Ref("q")),
         call("olGetQueueInfo", Ref("q"), E("QueueInfo", "EMPTY")),
         call("olDestroyEvent", Ref("e")),
         call("olSyncEvent", Ref("e")),
         call("olDestroyQueue", Ref("q")),
         call("olSyncQueue", Ref("q")),
         call("olDestroyQueue", Ref("q"))),
    _one("olCreateQueue.NULL_device", call("olCreateQueue", NULL), checks=("olCreateQueue: NULL == Device",)),
    _one("olDestroyQueue.NULL", call("olDestroyQueue", NULL), checks=("olDestroyQueue: NULL == Queue",)),
    _one("olSyncQueue.NULL", call("olSyncQueue", NULL), checks=("olSyncQueue: NULL == Queue",)),
    _one("olWaitEvents.NULL_queue", call("olWaitEvents", NULL, Events(())), checks=("olWaitEvents: NULL == Queue",)),
    _one("olWaitEvents.NULL_queue_NULL_events", call("olWaitEvents", NULL, NULL)),
    _one("olWaitEvents.NULL_queue_NULL_event", call("olWaitEvents", NULL, Events((NULL,))),
         checks=("olWaitEvents: Any event handle in the list is NULL",)),
    _one("olLaunchHostFunction.NULL_queue", call("olLaunchHostFunction", NULL, HostFunction()),
         checks=("olLaunchHostFunction: NULL == Queue",)),
    _one("olLaunchHostFunction.NULL_queue_NULL_callback", call("olLaunchHostFunction", NULL, NULL)),
    *_null_handle_info("olGetQueueInfo", "NULL == Queue"),
    _one("olCreateEvent.NULL_queue", call("olCreateEvent", NULL), checks=("olCreateEvent: NULL == Queue",)),
    _one("olDestroyEvent.NULL", call("olDestroyEvent", NULL), checks=("olDestroyEvent: NULL == Event",)),
    _one("olSyncEvent.NULL", call("olSyncEvent", NULL), checks=("olSyncEvent: NULL == Event",)),
    *_null_handle_info("olGetEventInfo", "NULL == Event"),

    # -- programs, symbols, kernels ------------------------------------------------------------------
    _one("olCreateProgram.host_elf", call("olCreateProgram", HOST, ELF, save="p"),
         call("olGetSymbol", Ref("p"), "write_one", KERNEL, save="k"),
         call("olGetSymbolInfo", Ref("k"), E("SymbolInfo", "KIND")),
         call("olGetSymbolInfoSize", Ref("k"), E("SymbolInfo", "GLOBAL_VARIABLE_SIZE")),
         call("olGetSymbol", Ref("p"), "counter", GLOBAL, save="g"),
         call("olGetSymbolInfo", Ref("g"), E("SymbolInfo", "GLOBAL_VARIABLE_SIZE")),
         call("olGetSymbolInfoSize", Ref("g"), E("SymbolInfo", "GLOBAL_VARIABLE_ADDRESS")),
         call("olGetSymbol", Ref("p"), "missing", KERNEL),
         call("olLaunchKernel", NULL, HOST, Ref("k"), Blob((Ptr("out"),)), Launch()),
         call("olLaunchKernel", NULL, HOST, Ref("g"), Blob((Ptr("out"),)), Launch()),
         call("olCalculateOptimalOccupancy", HOST, Ref("g"), 0),
         Read("out"),
         call("olDestroyProgram", Ref("p")),
         call("olGetSymbolInfo", Ref("k"), E("SymbolInfo", "KIND")),
         call("olDestroyProgram", Ref("p")), out=4),
    _one("olCreateProgram.not_an_image", call("olCreateProgram", HOST, Image(b"not a program image"))),
    _one("olCreateProgram.empty_image", call("olCreateProgram", HOST, Image(b""))),
    _one("olCreateProgram.NULL_device", call("olCreateProgram", NULL, Image(b"x")),
         checks=("olCreateProgram: NULL == Device",)),
    _one("olCreateProgram.NULL_image", call("olCreateProgram", HOST, NULL),
         checks=("olCreateProgram: NULL == ProgData",)),
    _one("olCreateProgram.NULL_device_NULL_image", call("olCreateProgram", NULL, NULL)),
    _one("olIsValidBinary.host_elf", call("olIsValidBinary", HOST, ELF)),
    _one("olIsValidBinary.not_an_image", call("olIsValidBinary", HOST, Image(b"not a program image"))),
    _one("olIsValidBinary.empty_image", call("olIsValidBinary", HOST, Image(b""))),
    _one("olIsValidBinary.NULL_device", call("olIsValidBinary", NULL, Image(b"x")),
         checks=("olIsValidBinary: NULL == Device",)),
    _one("olIsValidBinary.NULL_image", call("olIsValidBinary", HOST, NULL),
         checks=("olIsValidBinary: NULL == ProgData",)),
    _one("olIsValidBinary.NULL_device_NULL_image", call("olIsValidBinary", NULL, NULL)),
    _one("olDestroyProgram.NULL", call("olDestroyProgram", NULL), checks=("olDestroyProgram: NULL == Program",)),
    _one("olGetSymbol.NULL_program", call("olGetSymbol", NULL, "write_one", KERNEL),
         checks=("olGetSymbol: NULL == Program",)),
    _one("olGetSymbol.NULL_program_NULL_name", call("olGetSymbol", NULL, NULL, KERNEL)),
    _one("olGetSymbol.NULL_program_invalid_kind", call("olGetSymbol", NULL, "write_one", BAD)),
    *_null_handle_info("olGetSymbolInfo", "NULL == Symbol"),
    _one("olLaunchKernel.NULL_device", call("olLaunchKernel", NULL, NULL, NULL, NULL, Launch()),
         checks=("olLaunchKernel: NULL == Device",)),
    _one("olLaunchKernel.NULL_kernel", call("olLaunchKernel", NULL, HOST, NULL, NULL, Launch()),
         checks=("olLaunchKernel: NULL == Kernel",)),
    _one("olLaunchKernel.NULL_kernel_NULL_launch_sizes", call("olLaunchKernel", NULL, HOST, NULL, Blob((b"1234",)),
                                                              NULL)),
    _one("olCalculateOptimalOccupancy.NULL_device", call("olCalculateOptimalOccupancy", NULL, NULL, 0),
         checks=("olCalculateOptimalOccupancy: NULL == Device",)),
    _one("olCalculateOptimalOccupancy.NULL_kernel", call("olCalculateOptimalOccupancy", HOST, NULL, 0),
         checks=("olCalculateOptimalOccupancy: NULL == Kernel",)),
)

CASES_BY_NAME: dict[str, Case] = {case.name: case for case in CASES}
assert len(CASES_BY_NAME) == len(CASES), "two cases share a name"

# The test program's source (built with cc into the "elf" resource).
PROGRAM_SOURCE = """\
#include <offloadrt/host_kernel.h>
#include <stdint.h>
#include <string.h>

OL_HOST_EXPORT int32_t counter[4];

OL_HOST_KERNEL write_one(const void *args, const ol_host_launch_t *launch) {
  int32_t *out;
  (void)launch;
  memcpy(&out, args, sizeof out);
  *out = 1;
  return 0;
}
"""
