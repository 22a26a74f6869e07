"""Memory on GPU stand-ins: each allocation kind's driver calls, out of memory, copies in every
direction (peers included, with and without direct access), and fills of every pattern width."""

from __future__ import annotations

import struct

import pytest
from gpu_fixtures import Runtime, expect, gpu_device, host_buffer, in_new_thread
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from offloadrt import AllocType, ErrorCode, MemInfo, OffloadError, api

from .vendors import Vendor

ALLOCATIONS = [(AllocType.DEVICE, "alloc_device", "free_device", "device"),
               (AllocType.HOST, "alloc_host", "free_host", "host"),
               (AllocType.MANAGED, "alloc_managed", "free_device", "managed")]


@pytest.mark.parametrize(("kind", "alloc", "free", "standin_kind"), ALLOCATIONS, ids=[k.name for k, *_ in ALLOCATIONS])
def test_each_allocation_kind_uses_its_driver_calls(vendor: Vendor, rt: Runtime, kind: AllocType, alloc: str,
                                                    free: str, standin_kind: str) -> None:
    for ordinal, device in enumerate(rt.gpus):
        pointer = api.olMemAlloc(device, kind, 4096)
        args = vendor.calls_of(alloc)[-1]
        assert args == (4096, *vendor.alloc_arguments(kind)), args
        alloc_record = vendor.standin.state().allocations[pointer]
        assert (alloc_record.kind, alloc_record.size, alloc_record.device.ordinal) == (standin_kind, 4096, ordinal)
        assert api.olGetMemInfo(pointer + 100, MemInfo.BASE) == pointer
        assert api.olGetMemInfo(pointer, MemInfo.TYPE) == kind
        assert api.olGetMemInfo(pointer, MemInfo.DEVICE) is device
        frees = vendor.count(free)
        api.olMemFree(pointer)
        assert vendor.count(free) == frees + 1 and int(vendor.calls_of(free)[-1][0]) == pointer
        assert pointer not in vendor.standin.state().allocations


@pytest.mark.parametrize(("kind", "alloc"), [(k, c) for k, c, *_ in ALLOCATIONS], ids=[k.name for k, *_ in ALLOCATIONS])
def test_out_of_memory_is_out_of_resources(vendor: Vendor, rt: Runtime, kind: AllocType, alloc: str) -> None:
    status = vendor.inject(alloc, "OUT_OF_MEMORY")
    err = expect(ErrorCode.OUT_OF_RESOURCES, api.olMemAlloc, rt.gpus[0], kind, 1024)
    assert f"{vendor.call(alloc)}: {status.name} (out of memory)" in err.details, err
    api.olMemFree(api.olMemAlloc(rt.gpus[0], kind, 1024))  # the device still works


def test_an_exhausted_device_budget_is_out_of_resources(vendor: Vendor, monkeypatch: pytest.MonkeyPatch) -> None:
    with vendor.runtime(monkeypatch, devices=[vendor.spec(memory_budget=1 << 20), vendor.spec()]) as runtime:
        err = expect(ErrorCode.OUT_OF_RESOURCES, api.olMemAlloc, runtime.gpus[0], AllocType.DEVICE, 2 << 20)
        assert f"{vendor.call('alloc_device')}: {vendor.status('OUT_OF_MEMORY').name}" in err.details, err
        api.olMemFree(api.olMemAlloc(runtime.gpus[0], AllocType.DEVICE, 1 << 19))
        api.olMemFree(api.olMemAlloc(runtime.gpus[1], AllocType.DEVICE, 2 << 20))  # another device's budget


def test_a_failed_free_keeps_the_allocation(vendor: Vendor, rt: Runtime) -> None:
    pointer = api.olMemAlloc(rt.gpus[0], AllocType.DEVICE, 64)
    status = vendor.inject("free_device", "INVALID_VALUE")
    err = expect(ErrorCode.INVALID_ARGUMENT, api.olMemFree, pointer)
    assert f"{vendor.call('free_device')}: {status.name}" in err.details, err
    assert api.olGetMemInfo(pointer, MemInfo.SIZE) == 64  # still known: it can be freed again
    api.olMemFree(pointer)
    expect(ErrorCode.INVALID_ARGUMENT, api.olMemFree, pointer)


# ---- copies ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("with_queue", [False, True], ids=["no-queue", "queue"])
def test_memcpy_in_every_direction(vendor: Vendor, rt: Runtime, with_queue: bool) -> None:
    gpu0, gpu1 = rt.gpus
    host = rt.host
    read, write = vendor.standin.read, vendor.standin.write
    queues = {gpu: api.olCreateQueue(gpu) for gpu in rt.gpus} if with_queue else {}
    size = 4096 + 3
    data = bytes((i * 7 + 1) % 256 for i in range(size))
    source, source_address = host_buffer(data)
    back, back_address = host_buffer(size)
    a0, b0 = (api.olMemAlloc(gpu0, AllocType.DEVICE, size) for _ in range(2))
    a1 = api.olMemAlloc(gpu1, AllocType.DEVICE, size)
    pinned = api.olMemAlloc(gpu1, AllocType.HOST, size)
    managed = api.olMemAlloc(gpu0, AllocType.MANAGED, size)

    def copy(dst: int, dst_device: api.Device, src: int, src_device: api.Device, role: str) -> None:
        performer = dst_device if src_device is host else src_device
        before = vendor.count(role)
        api.olMemcpy(queues.get(performer), dst, dst_device, src, src_device, size)
        if with_queue:
            in_new_thread(api.olSyncQueue, queues[performer])
        assert vendor.count(role) == before + 1, vendor.call(role)
        stream = vendor.calls_of(role)[-1][-1]
        if with_queue:
            assert stream == queues[performer]._ai.stream  # type: ignore[union-attr]
        else:  # a temporary stream of the device, synchronised before olMemcpy returned
            assert vendor.standin.state().streams[int(stream)].ctx.device.ordinal == gpu_device(performer).device_id

    copy(a0, gpu0, source_address, host, "memcpy_htod")  # host -> device
    assert read(a0, size) == data
    copy(b0, gpu0, a0, gpu0, "memcpy_dtod")  # device -> same device
    assert read(b0, size) == data
    copy(a1, gpu1, b0, gpu0, "memcpy_peer")  # device -> other device
    assert read(a1, size) == data
    dst, dst_device, src, src_device, nbytes, _stream = vendor.calls_of("memcpy_peer")[-1]
    assert (dst, int(dst_device), src, int(src_device), nbytes) == (a1, vendor.peer(gpu1), b0, vendor.peer(gpu0), size)
    write(b0, bytes(size))
    copy(managed, gpu0, a1, gpu1, "memcpy_peer")  # and back the other way
    assert read(managed, size) == data
    copy(back_address, host, managed, gpu0, "memcpy_dtoh")  # device -> host
    assert back.raw == data
    copy(pinned, host, a1, gpu1, "memcpy_dtoh")  # into pinned host memory
    assert read(pinned, size) == data
    copy(b0, gpu0, pinned, host, "memcpy_htod")  # from pinned host memory
    assert read(b0, size) == data
    # Direct access enabled once per direction, by the source device, then remembered.
    assert [int(args[0]) for args in vendor.calls_of("peer_enable")] == [vendor.peer(gpu1), vendor.peer(gpu0)]
    assert [tuple(map(int, args)) for args in vendor.calls_of("peer_can_access")] == [(0, 1), (1, 0)]
    state = vendor.standin.state()
    assert [device.context.peers for device in state.devices] == [{vendor.peer(gpu1)}, {vendor.peer(gpu0)}]
    copy(a1, gpu1, a0, gpu0, "memcpy_peer")
    assert vendor.count("peer_enable") == 2 and vendor.count("peer_can_access") == 2
    for queue in queues.values():
        api.olDestroyQueue(queue)
    for pointer in (a0, b0, a1, pinned, managed):
        api.olMemFree(pointer)


def test_peer_copies_work_without_direct_peer_access(vendor: Vendor, monkeypatch: pytest.MonkeyPatch) -> None:
    no_peers = [vendor.spec(peers=set()), vendor.spec(peers=set())]
    with vendor.runtime(monkeypatch, devices=no_peers) as runtime:
        gpu0, gpu1 = runtime.gpus
        a0, a1 = api.olMemAlloc(gpu0, AllocType.DEVICE, 64), api.olMemAlloc(gpu1, AllocType.DEVICE, 64)
        vendor.standin.write(a0, bytes(range(64)))
        for _ in range(2):
            api.olMemcpy(None, a1, gpu1, a0, gpu0, 64)
        assert vendor.standin.read(a1, 64) == bytes(range(64))
        assert vendor.count("memcpy_peer") == 2 and vendor.count("peer_enable") == 0
        assert vendor.count("peer_can_access") == 1  # asked once, remembered


def test_peer_access_enabled_by_someone_else_is_fine(vendor: Vendor, rt: Runtime) -> None:
    gpu0, gpu1 = rt.gpus
    in_new_thread(vendor.enable_peer_access_elsewhere, 0, 1)  # another library, on its own thread
    a0, a1 = api.olMemAlloc(gpu0, AllocType.DEVICE, 64), api.olMemAlloc(gpu1, AllocType.DEVICE, 64)
    vendor.standin.write(a0, b"\x5a" * 64)
    api.olMemcpy(None, a1, gpu1, a0, gpu0, 64)  # the driver says: already enabled; nothing wrong
    assert vendor.standin.read(a1, 64) == b"\x5a" * 64
    assert vendor.count("peer_enable") == 2
    assert gpu_device(gpu0).peers == {1: True}


# ---- fills ----------------------------------------------------------------------------------------

FILL_WIDTHS = [1, 2, 3, 4, 5, 6, 8, 12, 16, 17]


@pytest.mark.parametrize("width", FILL_WIDTHS, ids=[f"pattern{w}" for w in FILL_WIDTHS])
def test_fill_writes_the_pattern_exactly(vendor: Vendor, rt: Runtime, width: int) -> None:
    """Every pattern size at aligned and odd addresses, with and without a queue: the filled bytes
    are the pattern repeated, the bytes around them untouched; 1/2/4-byte patterns at aligned
    addresses use the driver's memsets, others strided 2-D lanes."""
    gpu = rt.gpus[0]
    queue = api.olCreateQueue(gpu)
    pattern = bytes((0x81 + 37 * i) % 256 for i in range(width))
    copies = 7
    size = 512
    problems: list[str] = []
    for offset in (0, 1, 2, 3, 4):
        for use_queue in (False, True):
            pointer = api.olMemAlloc(gpu, AllocType.DEVICE, size)
            vendor.standin.write(pointer, b"\xee" * size)
            names = len(vendor.standin.calls)
            where = f"offset {offset}, {'queue' if use_queue else 'no queue'}"
            try:
                api.olMemFill(queue if use_queue else None, pointer + 16 + offset, pattern, width * copies)
                if use_queue and not vendor.fills_idle_queue_at_once:
                    in_new_thread(api.olSyncQueue, queue)
            except OffloadError as exc:
                problems.append(f"{where}: {exc}")
                api.olMemFree(pointer)
                continue
            expected = b"\xee" * (16 + offset) + pattern * copies
            expected += b"\xee" * (size - len(expected))
            got = vendor.standin.read(pointer, size)
            if got != expected:
                problems.append(f"{where}: wrote {got[:16 + offset + width * copies + 4].hex()}")
            memset8 = vendor.call("memset8")
            prefix, prefix_2d = memset8[:-len("D8Async")], vendor.call("memset2d8")[:-len("8Async")]
            used = {name for name in vendor.call_names()[names:] if name.startswith(prefix)}
            if width in (1, 2, 4) and (16 + offset) % width == 0:
                if used != {vendor.call(f"memset{8 * width}")}:
                    problems.append(f"{where}: driver calls {sorted(used)}, not one memset of the pattern")
            elif not (used and all(name.startswith(prefix_2d) for name in used)):
                problems.append(f"{where}: driver calls {sorted(used)}, not strided 2-D lanes")
            api.olMemFree(pointer)
    api.olDestroyQueue(queue)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("value", [0xFFFFFFFF, 0x80000000, 0x7FFFFFFF, 0xDEADBEEF, 0x00000001])
def test_four_byte_fills_pass_the_bits_as_the_drivers_type(vendor: Vendor, rt: Runtime, value: int) -> None:
    """The 32-bit memset takes CUDA's unsigned int, HIP's (signed) int: the same 32 bits either way."""
    gpu = rt.gpus[0]
    pointer = api.olMemAlloc(gpu, AllocType.DEVICE, 64)
    pattern = struct.pack("<I", value)
    api.olMemFill(None, pointer, pattern, 64)
    assert vendor.standin.read(pointer, 64) == pattern * 16
    assert vendor.calls_of("memset32")[-1][1] == vendor.memset32_value(value)
    api.olMemFill(None, pointer, pattern * 2, 64)  # an 8-byte pattern: two 32-bit lanes
    assert vendor.standin.read(pointer, 64) == pattern * 16
    assert [args[2] for args in vendor.calls_of("memset2d32")[-2:]] == [value, value]
    api.olMemFree(pointer)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pattern=st.binary(min_size=1, max_size=17), count_=st.integers(1, 40), offset=st.integers(0, 7),
       queued=st.booleans())
def test_fills_match_a_host_model(vendor: Vendor, rt: Runtime, pattern: bytes, count_: int, offset: int,
                                  queued: bool) -> None:
    gpu = rt.gpus[0]
    size = len(pattern) * count_
    total = offset + size + 16
    pointer = api.olMemAlloc(gpu, AllocType.MANAGED, total)
    try:
        vendor.standin.write(pointer, b"\xa5" * total)
        queue = api.olCreateQueue(gpu) if queued else None
        api.olMemFill(queue, pointer + offset, pattern, size)
        if queue is not None:
            api.olSyncQueue(queue)
            api.olDestroyQueue(queue)
        assert vendor.standin.read(pointer, total) == b"\xa5" * offset + pattern * count_ + b"\xa5" * 16
    finally:
        api.olMemFree(pointer)
