"""Memory: olMemAlloc/olMemFree, olGetMemInfo, olMemcpy and olMemFill on the host device."""

from __future__ import annotations

import ctypes
import itertools
import mmap
import random
import threading

import numpy as np
import pytest
from conftest import Gate, expect_error, run_threads
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from offloadrt import AllocType, ErrorCode, MemInfo, api

PAGE = mmap.PAGESIZE
ALLOC_TYPES = list(AllocType)
PROPERTY_SETTINGS = settings(max_examples=60, deadline=None,
                             suppress_health_check=[HealthCheck.function_scoped_fixture])


def read(address: int, size: int) -> bytes:
    return ctypes.string_at(address, size)


def write(address: int, data: bytes) -> None:
    ctypes.memmove(address, data, len(data))


# ---- allocation --------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ALLOC_TYPES, ids=lambda k: k.name)
@pytest.mark.parametrize("size", [1, 8, PAGE - 1, PAGE, PAGE + 1, 3 << 20])
def test_alloc_is_page_aligned_and_writable(host, kind, size):
    address = api.olMemAlloc(host, kind, size)
    try:
        assert isinstance(address, int) and address != 0
        assert address % PAGE == 0
        data = random.Random(size).randbytes(size)
        write(address, data)
        assert read(address, size) == data
    finally:
        api.olMemFree(address)


def test_alloc_size_zero_is_invalid_size(host):
    for kind in ALLOC_TYPES:
        expect_error(ErrorCode.INVALID_SIZE, api.olMemAlloc, host, kind, 0)


def test_alloc_many_of_varied_sizes_and_types(host):
    rng = random.Random(1234)
    sizes = [1, 3, 64, 1000, PAGE - 1, PAGE, PAGE + 1, 10_000, 65_536, 1 << 20]
    allocations: list[tuple[int, int, AllocType]] = []
    for index in range(400):
        size = rng.choice(sizes)
        kind = ALLOC_TYPES[index % len(ALLOC_TYPES)]
        address = api.olMemAlloc(host, kind, size)
        assert address % PAGE == 0
        tag = index.to_bytes(4, "little") * 2
        write(address, tag[:size])
        write(address + size - min(size, 8), tag[:min(size, 8)])
        allocations.append((address, size, kind))
    bases = [a for a, _, _ in allocations]
    assert len(set(bases)) == len(bases), "an address was handed out twice"
    ordered = sorted(allocations)
    for (a, size_a, _), (b, _, _) in itertools.pairwise(ordered):
        assert a + size_a <= b, "allocations overlap"
    for index, (address, size, kind) in enumerate(allocations):
        tag = index.to_bytes(4, "little") * 2
        assert read(address, min(size, 8)) == tag[:min(size, 8)]
        assert read(address + size - min(size, 8), min(size, 8)) == tag[:min(size, 8)]
        assert api.olGetMemInfo(address + size - 1, MemInfo.BASE) == address
        assert api.olGetMemInfo(address, MemInfo.SIZE) == size
        assert api.olGetMemInfo(address, MemInfo.TYPE) == kind
    rng.shuffle(allocations)
    for address, _, _ in allocations:
        api.olMemFree(address)
    for address, _, _ in allocations[:50]:
        expect_error(ErrorCode.NOT_FOUND, api.olGetMemInfo, address, MemInfo.SIZE)
        expect_error(ErrorCode.INVALID_ARGUMENT, api.olMemFree, address)


@pytest.mark.parametrize("kind", ALLOC_TYPES, ids=lambda k: k.name)
def test_mem_info_of_each_alloc_type(host, kind):
    size = 10_000
    base = api.olMemAlloc(host, kind, size)
    try:
        for inside in (base, base + 1, base + size // 2, base + size - 1):
            device = api.olGetMemInfo(inside, MemInfo.DEVICE)
            assert device is host
            assert api.olGetMemInfo(inside, MemInfo.BASE) == base
            assert api.olGetMemInfo(inside, MemInfo.SIZE) == size
            alloc_type = api.olGetMemInfo(inside, MemInfo.TYPE)
            assert alloc_type == kind and isinstance(alloc_type, AllocType)
        assert api.olGetMemInfoSize(base, MemInfo.DEVICE) == 8
        assert api.olGetMemInfoSize(base, MemInfo.BASE) == 8
        assert api.olGetMemInfoSize(base, MemInfo.SIZE) == 8
        assert api.olGetMemInfoSize(base, MemInfo.TYPE) == 4
        # One past the end is not inside (no other allocation can start there: it is not page-aligned).
        expect_error(ErrorCode.NOT_FOUND, api.olGetMemInfo, base + size, MemInfo.BASE)
    finally:
        api.olMemFree(base)
    expect_error(ErrorCode.NOT_FOUND, api.olGetMemInfo, base, MemInfo.BASE)


def test_alloc_free_churn_from_20_threads(host):
    live: set[int] = set()
    live_lock = threading.Lock()

    def churn(seed: int) -> None:
        rng = random.Random(seed)
        mine: list[tuple[int, int, bytes]] = []
        for step in range(150):
            if mine and (len(mine) > 8 or rng.random() < 0.4):
                address, size, tag = mine.pop(rng.randrange(len(mine)))
                assert read(address, len(tag)) == tag, "another thread wrote into my allocation"
                assert api.olGetMemInfo(address + size - 1, MemInfo.BASE) == address
                with live_lock:
                    live.remove(address)
                api.olMemFree(address)
                continue
            size = rng.choice([1, 16, 100, PAGE, PAGE + 3, 50_000])
            kind = rng.choice(ALLOC_TYPES)
            address = api.olMemAlloc(host, kind, size)
            with live_lock:
                assert address not in live, f"{address:#x} handed out twice while live"
                live.add(address)
            tag = bytes([seed, step & 0xFF, 0xA5, 0x5A])[:size]
            write(address, tag)
            mine.append((address, size, tag))
        for address, _, tag in mine:
            assert read(address, len(tag)) == tag
            with live_lock:
                live.remove(address)
            api.olMemFree(address)

    run_threads(20, churn)
    assert not live


# ---- olMemcpy ------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ALLOC_TYPES, ids=lambda k: k.name)
def test_memcpy_host_to_host_without_queue(host, alloc, kind):
    size = 3 * PAGE + 5
    src = alloc(size, kind)
    dst = alloc(size, kind)
    data = random.Random(7).randbytes(size)
    write(src, data)
    write(dst, b"\0" * size)
    assert api.olMemcpy(None, dst, host, src, host, size) is None
    assert read(dst, size) == data
    # Plain host memory (not from olMemAlloc) is named with the host device too.
    plain = ctypes.create_string_buffer(size)
    api.olMemcpy(None, ctypes.addressof(plain), host, dst, host, size)
    assert plain.raw == data


def test_memcpy_on_a_queue_runs_in_order(host, queue, alloc):
    size = 100_000
    src = alloc(size)
    dst = alloc(size)
    data = random.Random(8).randbytes(size)
    write(src, data)
    write(dst, b"\x11" * size)
    with Gate(queue) as gate:
        api.olMemcpy(queue, dst, host, src, host, size)
        assert not api.olQueryQueue(queue)
        assert read(dst, size) == b"\x11" * size, "the copy ran before the work queued ahead of it"
        gate.open()
        api.olSyncQueue(queue)
    assert read(dst, size) == data
    assert api.olQueryQueue(queue)


def test_memcpy_queue_copies_in_submission_order(host, queue, alloc):
    """Two queued copies into one place: the later one wins."""
    size = 4096
    first, second, dst = alloc(size), alloc(size), alloc(size)
    write(first, b"\x01" * size)
    write(second, b"\x02" * size)
    with Gate(queue) as gate:
        api.olMemcpy(queue, dst, host, first, host, size)
        api.olMemcpy(queue, dst, host, second, host, size)
        gate.open()
    api.olSyncQueue(queue)
    assert read(dst, size) == b"\x02" * size


def test_memcpy_of_size_zero_does_nothing(host, queue, alloc):
    src = alloc(64)
    dst = alloc(64)
    write(src, b"\xAA" * 64)
    write(dst, b"\x55" * 64)
    api.olMemcpy(None, dst, host, src, host, 0)
    api.olMemcpy(queue, dst, host, src, host, 0)
    api.olSyncQueue(queue)
    assert read(dst, 64) == b"\x55" * 64
    api.olMemFill(None, dst, b"\x00", 0)
    api.olMemFill(queue, dst, b"\x00\x01\x02", 0)
    api.olSyncQueue(queue)
    assert read(dst, 64) == b"\x55" * 64


@st.composite
def copy_plans(draw):
    src_size = draw(st.one_of(st.integers(1, 64), st.integers(1, 70_000)))
    dst_size = draw(st.one_of(st.integers(1, 64), st.integers(1, 70_000)))
    size = draw(st.integers(0, min(src_size, dst_size)))
    src_offset = draw(st.integers(0, src_size - size))
    dst_offset = draw(st.integers(0, dst_size - size))
    return src_size, dst_size, size, src_offset, dst_offset


@PROPERTY_SETTINGS
@given(plan=copy_plans(), seed=st.integers(0, 2**32 - 1), use_queue=st.booleans(),
       kinds=st.tuples(st.sampled_from(ALLOC_TYPES), st.sampled_from(ALLOC_TYPES)))
def test_memcpy_matches_bytes_slicing(host, queue, plan, seed, use_queue, kinds):
    src_size, dst_size, size, src_offset, dst_offset = plan
    rng = random.Random(seed)
    src_data = rng.randbytes(src_size)
    dst_data = rng.randbytes(dst_size)
    src = api.olMemAlloc(host, kinds[0], src_size)
    dst = api.olMemAlloc(host, kinds[1], dst_size)
    try:
        write(src, src_data)
        write(dst, dst_data)
        api.olMemcpy(queue if use_queue else None, dst + dst_offset, host, src + src_offset, host, size)
        if use_queue:
            api.olSyncQueue(queue)
        expected = bytearray(dst_data)
        expected[dst_offset:dst_offset + size] = src_data[src_offset:src_offset + size]
        assert read(dst, dst_size) == bytes(expected)
        assert read(src, src_size) == src_data
    finally:
        api.olMemFree(src)
        api.olMemFree(dst)


# ---- olMemFill -----------------------------------------------------------------------------------

@st.composite
def fill_plans(draw):
    width = draw(st.integers(1, 40))
    pattern = draw(st.binary(min_size=width, max_size=width))
    count = draw(st.one_of(st.integers(0, 8), st.integers(0, 3000)))
    offset = draw(st.integers(0, 300))
    tail = draw(st.integers(0, 64))
    return pattern, count, offset, tail


@PROPERTY_SETTINGS
@given(plan=fill_plans(), seed=st.integers(0, 2**32 - 1), use_queue=st.booleans(),
       kind=st.sampled_from(ALLOC_TYPES))
def test_fill_changes_exactly_the_filled_range(host, queue, plan, seed, use_queue, kind):
    pattern, count, offset, tail = plan
    fill_size = len(pattern) * count
    total = max(1, offset + fill_size + tail)
    background = random.Random(seed).randbytes(total)
    base = api.olMemAlloc(host, kind, total)
    try:
        write(base, background)
        api.olMemFill(queue if use_queue else None, base + offset, pattern, fill_size)
        if use_queue:
            api.olSyncQueue(queue)
        after = read(base, total)
        assert after[:offset] == background[:offset], "bytes before the fill changed"
        assert after[offset:offset + fill_size] == pattern * count
        assert after[offset + fill_size:] == background[offset + fill_size:], "bytes after the fill changed"
    finally:
        api.olMemFree(base)


@pytest.mark.parametrize("use_queue", [False, True], ids=["sync", "queue"])
@pytest.mark.parametrize("width", [1, 2, 4, 3, 16, 17])
def test_fill_with_pattern_width(host, queue, alloc, width, use_queue):
    pattern = bytes((0x30 + 7 * i) & 0xFF for i in range(width))
    count = (3 << 20) // width + 5  # more than the fill's internal chunk of 1 MiB
    fill_size = count * width
    guard = 64
    base = alloc(fill_size + 2 * guard)
    view = np.frombuffer((ctypes.c_uint8 * (fill_size + 2 * guard)).from_address(base), dtype=np.uint8)
    view[:] = 0xEE
    api.olMemFill(queue if use_queue else None, base + guard, bytearray(pattern), fill_size)
    if use_queue:
        api.olSyncQueue(queue)
    filled = view[guard:guard + fill_size].reshape(count, width)
    assert (filled == np.frombuffer(pattern, dtype=np.uint8)).all()
    assert (view[:guard] == 0xEE).all() and (view[guard + fill_size:] == 0xEE).all()


def test_fill_on_a_queue_runs_in_order(host, queue, alloc):
    size = 1 << 16
    base = alloc(size)
    write(base, b"\x00" * size)
    with Gate(queue) as gate:
        api.olMemFill(queue, base, b"\x12\x34\x56", size - size % 3)
        assert read(base, size) == b"\x00" * size, "the fill ran before the work queued ahead of it"
        gate.open()
    api.olSyncQueue(queue)
    assert read(base, size - size % 3) == b"\x12\x34\x56" * (size // 3)
    assert read(base + size - size % 3, size % 3) == b"\x00" * (size % 3)


def test_fill_of_plain_host_memory(host):
    buffer = ctypes.create_string_buffer(b"\xFF" * 100, 100)
    api.olMemFill(None, ctypes.addressof(buffer) + 10, b"ab", 80)
    assert buffer.raw == b"\xFF" * 10 + b"ab" * 40 + b"\xFF" * 10


def test_fill_size_not_a_multiple_of_the_pattern(host, alloc):
    base = alloc(64)
    write(base, b"\x77" * 64)
    expect_error(ErrorCode.INVALID_SIZE, api.olMemFill, None, base, b"abc", 10)
    expect_error(ErrorCode.INVALID_SIZE, api.olMemFill, None, base, b"", 0)
    assert read(base, 64) == b"\x77" * 64
