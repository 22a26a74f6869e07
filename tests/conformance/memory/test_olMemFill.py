"""Port of offload/unittests/OffloadAPI/memory/olMemFill.cpp.

Covers the cases of every upstream version seen: the 2025 file, the late-2025 branch with
``InvalidPatternSizeLargerThanFillSize`` and the ``SuccessNonPow2Pattern*`` fallbacks (plus its two
AMDGPU queue-path cases), and the 2026 file with the repeated-/mixed-byte additions. All fills go
through the fixture's queue; ``…Enqueue`` cases first block that queue with a ManuallyTriggeredTask,
so the fill is really enqueued rather than done at once.
"""

from __future__ import annotations

import ctypes
import struct

import pytest

from offloadrt import AllocType, ErrorCode, PlatformBackend, api

from ..conftest import ManuallyTriggeredTask, assert_error, backend_of


def _check_pattern(actual: bytes, pattern: bytes, size: int) -> None:
    """``actual`` must be whole copies of ``pattern`` over ``size`` bytes; name the first wrong byte."""
    expected = (pattern * (size // len(pattern) + 1))[:size]
    assert len(actual) == size
    if actual != expected:
        index = next(i for i in range(size) if actual[i] != expected[i])
        raise AssertionError(f"byte {index} is {actual[index]:#04x}, expected {expected[index]:#04x} "
                             f"(pattern {pattern.hex()}, fill size {size})")


def _test_body(queue: api.Queue, device: api.Device, pattern: bytes, size: int, block: bool = False) -> None:
    """Upstream's ``test_body<PatternTy, PatternVal, Size, Block>``: MANAGED memory, checked element-wise."""
    manual = ManuallyTriggeredTask()
    if block:
        manual.enqueue(queue)
    alloc = api.olMemAlloc(device, AllocType.MANAGED, size)
    api.olMemFill(queue, alloc, pattern, size)
    if block:
        manual.trigger()
    api.olSyncQueue(queue)
    checked = size // len(pattern) * len(pattern)  # the N = Size / sizeof(Pattern) whole elements
    _check_pattern(ctypes.string_at(alloc, checked), pattern, checked)
    api.olMemFree(alloc)


def _fill_host_bytes(queue: api.Queue, device: api.Device, alloc_type: AllocType, pattern: bytes, size: int,
                     block: bool = False) -> None:
    """2026 ``fill_host_bytes``: host-accessible memory, checked directly on the host."""
    assert size % len(pattern) == 0
    manual = ManuallyTriggeredTask()
    if block:
        manual.enqueue(queue)
    alloc = api.olMemAlloc(device, alloc_type, size)
    api.olMemFill(queue, alloc, pattern, size)
    if block:
        manual.trigger()
    api.olSyncQueue(queue)
    _check_pattern(ctypes.string_at(alloc, size), pattern, size)
    api.olMemFree(alloc)


def _fill_device_bytes(queue: api.Queue, device: api.Device, host: api.Device, pattern: bytes, size: int,
                       block: bool = False, page_locked: bool = False) -> None:
    """2026 ``fill_device_bytes``: DEVICE memory, copied back to the host on the same queue and checked.

    As upstream: the copy goes into pageable memory (upstream's ``std::vector``, a ctypes array
    here) and, when ``block``, is enqueued before the task is triggered. A driver whose
    asynchronous device-to-host copy into pageable memory returns only once the stream ran (CUDA:
    measured on an H100; HIP: clr waits for the stream) makes a plugin that hands the copy to it
    wait for the blocked task, which gives up after 1 s: the ``…Enqueue`` cases cannot pass there
    (see :func:`_blocked_copy_to_pageable_memory`). Upstream skips them on Level Zero for the same
    deadlock. ``page_locked``: copy into an ``olMemAlloc(HOST)`` buffer instead, which every driver
    writes later in stream order (offloadrt's variant, for the GPUs).
    """
    assert size % len(pattern) == 0
    manual = ManuallyTriggeredTask()
    if block:
        manual.enqueue(queue)
    alloc = api.olMemAlloc(device, AllocType.DEVICE, size)
    api.olMemFill(queue, alloc, pattern, size)
    if page_locked:
        output_address = api.olMemAlloc(device, AllocType.HOST, size)
        ctypes.memset(output_address, 0, size)
    else:
        output = (ctypes.c_uint8 * size)()
        output_address = ctypes.addressof(output)
    api.olMemcpy(queue, output_address, host, alloc, device, size)
    if block:
        manual.trigger()
    api.olSyncQueue(queue)
    _check_pattern(ctypes.string_at(output_address, size), pattern, size)
    if page_locked:
        api.olMemFree(output_address)
    api.olMemFree(alloc)


def _blocked_copy_to_pageable_memory(device: api.Device) -> None:
    """Skip on GPUs whose driver documents that a queued device-to-host copy into pageable memory
    returns only once the queue's earlier work has run (CUDA's cuMemcpyDtoHAsync, measured on an
    H100; HIP's hipMemcpyDtoHAsync, which clr makes wait for the stream): behind a task that is
    triggered only after the copy returns, the copy can never return. offloadrt hands such copies to
    the driver as they are (docs/api.md, olMemcpy); the ``_page_locked`` variants run the same
    blocked fill there with a page-locked destination."""
    backend = backend_of(device)
    if backend in (PlatformBackend.CUDA, PlatformBackend.AMDGPU):
        pytest.skip(f"{backend.name}: a queued copy into pageable memory waits for the queue's earlier work (the "
                    f"driver's documented behaviour), so behind the untriggered task it deadlocks by design")


U8_42 = struct.pack("=B", 0x42)
U16_4243 = struct.pack("=H", 0x4243)
U32_DEADBEEF = struct.pack("=I", 0xDEADBEEF)
LARGE = struct.pack("=QQ", 2**64 - 1, 2**64 - 1)  # struct { uint64_t A, B; } {UINT64_MAX, UINT64_MAX}
LARGE_BYTE_ALIGNED = struct.pack("=QQB", 2**64 - 1, 2**64 - 1, 255)  # packed, 17 bytes
FALLBACK_PATTERN = bytes([0x11, 0x22, 0x33])
MIXED_3 = bytes([0x01, 0x02, 0x03])
OVERSIZED_32 = bytes(range(1, 33))

# ---- test_body cases ----------------------------------------------------------------------------


def test_success8(queue: api.Queue, device: api.Device) -> None:
    _test_body(queue, device, U8_42, 1024)


def test_success8_not_multiple4(queue: api.Queue, device: api.Device) -> None:
    _test_body(queue, device, U8_42, 1023)


def test_success8_enqueue(queue: api.Queue, device: api.Device) -> None:
    _test_body(queue, device, U8_42, 1024, block=True)


def test_success8_not_multiple4_enqueue(queue: api.Queue, device: api.Device) -> None:
    _test_body(queue, device, U8_42, 1023, block=True)


# Upstream's Success16 uses a uint8_t 0x42 pattern since the test_body rewrite; the first 2025
# version used uint16_t 0x4242. Both inputs are run.
SUCCESS16_PATTERNS = [U8_42, struct.pack("=H", 0x4242)]
SUCCESS16_IDS = ["uint8_0x42", "uint16_0x4242_2025"]


@pytest.mark.parametrize("pattern", SUCCESS16_PATTERNS, ids=SUCCESS16_IDS)
def test_success16(queue: api.Queue, device: api.Device, pattern: bytes) -> None:
    _test_body(queue, device, pattern, 1024)


def test_success16_not_multiple4(queue: api.Queue, device: api.Device) -> None:
    _test_body(queue, device, U16_4243, 1022)


def test_success16_enqueue(queue: api.Queue, device: api.Device) -> None:
    _test_body(queue, device, U8_42, 1024, block=True)  # uint8_t, as upstream


def test_success16_not_multiple4_enqueue(queue: api.Queue, device: api.Device) -> None:
    _test_body(queue, device, U16_4243, 1022, block=True)


def test_success32(queue: api.Queue, device: api.Device) -> None:
    _test_body(queue, device, U32_DEADBEEF, 1024)


def test_success32_enqueue(queue: api.Queue, device: api.Device) -> None:
    _test_body(queue, device, U32_DEADBEEF, 1024, block=True)


# ---- the two AMDGPU queue-path cases (late-2025 branch) ------------------------------------------


def test_success32_idle_queue_completes_without_sync(queue: api.Queue, device: api.Device) -> None:
    if backend_of(device) != PlatformBackend.AMDGPU:
        pytest.skip("Idle-queue synchronous fill is AMDGPU-specific")  # as upstream
    size = 1024
    alloc = api.olMemAlloc(device, AllocType.MANAGED, size)
    api.olMemFill(queue, alloc, U32_DEADBEEF, size)
    assert api.olQueryQueue(queue) is True
    _check_pattern(ctypes.string_at(alloc, size), U32_DEADBEEF, size)
    api.olMemFree(alloc)


def test_success32_enqueue_stays_pending_until_host_task(queue: api.Queue, device: api.Device) -> None:
    """Upstream runs this on AMDGPU only; the ordering it checks holds for every in-order queue, so every device."""
    manual = ManuallyTriggeredTask()
    manual.enqueue(queue)
    size = 1024
    alloc = api.olMemAlloc(device, AllocType.MANAGED, size)
    ctypes.memset(alloc, 0, size)
    api.olMemFill(queue, alloc, U32_DEADBEEF, size)
    assert api.olQueryQueue(queue) is False
    assert ctypes.c_uint32.from_address(alloc).value == 0, "the fill ran before the blocking host function"
    manual.trigger()
    api.olSyncQueue(queue)
    _check_pattern(ctypes.string_at(alloc, size), U32_DEADBEEF, size)
    api.olMemFree(alloc)


# ---- large patterns ------------------------------------------------------------------------------


def test_success_large(queue: api.Queue, device: api.Device) -> None:
    _test_body(queue, device, LARGE, 1024)


def test_success_large_enqueue(queue: api.Queue, device: api.Device) -> None:
    _test_body(queue, device, LARGE, 1024, block=True)


def test_success_large_byte_aligned(queue: api.Queue, device: api.Device) -> None:
    _test_body(queue, device, LARGE_BYTE_ALIGNED, 17 * 64)


def test_success_large_byte_aligned_enqueue(queue: api.Queue, device: api.Device) -> None:
    _test_body(queue, device, LARGE_BYTE_ALIGNED, 17 * 64, block=True)


# ---- invalid sizes -------------------------------------------------------------------------------


def test_invalid_pattern_size(queue: api.Queue, device: api.Device) -> None:
    """Also upstream's later name ``InvalidSizeNotMultipleOfPatternSize`` (same inputs)."""
    size = 1025
    alloc = api.olMemAlloc(device, AllocType.MANAGED, size)
    assert_error(ErrorCode.INVALID_SIZE, api.olMemFill, queue, alloc, struct.pack("=H", 0x4242), size)
    api.olSyncQueue(queue)
    api.olMemFree(alloc)


def test_invalid_pattern_size_larger_than_fill_size(queue: api.Queue, device: api.Device) -> None:
    size = 4
    alloc = api.olMemAlloc(device, AllocType.MANAGED, size)
    assert_error(ErrorCode.INVALID_SIZE, api.olMemFill, queue, alloc, struct.pack("=Q", 0x4242424242424242), size)
    api.olSyncQueue(queue)
    api.olMemFree(alloc)


# ---- non-power-of-two pattern fallbacks (late-2025 branch) --------------------------------------


def test_success_non_pow2_pattern_managed(queue: api.Queue, device: api.Device) -> None:
    _fill_host_bytes(queue, device, AllocType.MANAGED, FALLBACK_PATTERN, len(FALLBACK_PATTERN) * 1000)


def test_success_non_pow2_pattern_managed_enqueue(queue: api.Queue, device: api.Device) -> None:
    _fill_host_bytes(queue, device, AllocType.MANAGED, FALLBACK_PATTERN, len(FALLBACK_PATTERN) * 1000, block=True)


def test_success_non_pow2_pattern_device(queue: api.Queue, device: api.Device, host: api.Device) -> None:
    _fill_device_bytes(queue, device, host, FALLBACK_PATTERN, len(FALLBACK_PATTERN) * 1000)


def test_success_non_pow2_pattern_device_small(queue: api.Queue, device: api.Device, host: api.Device) -> None:
    _fill_device_bytes(queue, device, host, FALLBACK_PATTERN, len(FALLBACK_PATTERN) * 2)


# ---- 2026 repeated-/mixed-byte additions ---------------------------------------------------------


def test_success_repeated_byte_not_pow2(queue: api.Queue, device: api.Device) -> None:
    _fill_host_bytes(queue, device, AllocType.MANAGED, bytes([0xAB] * 3), 3 * 341)


def test_success_repeated_byte_not_pow2_enqueue(queue: api.Queue, device: api.Device) -> None:
    _fill_host_bytes(queue, device, AllocType.MANAGED, bytes([0xAB] * 3), 3 * 341, block=True)


def test_success_mixed_bytes_managed(queue: api.Queue, device: api.Device) -> None:
    _fill_host_bytes(queue, device, AllocType.MANAGED, MIXED_3, 3 * 341)


def test_success_mixed_bytes_managed_enqueue(queue: api.Queue, device: api.Device) -> None:
    _fill_host_bytes(queue, device, AllocType.MANAGED, MIXED_3, 3 * 341, block=True)


def test_success_mixed_bytes_host(queue: api.Queue, device: api.Device) -> None:
    _fill_host_bytes(queue, device, AllocType.HOST, MIXED_3, 3 * 341)


def test_success_mixed_bytes_device_not_pow2(queue: api.Queue, device: api.Device, host: api.Device) -> None:
    _fill_device_bytes(queue, device, host, MIXED_3, 3 * 341)


def test_success_mixed_bytes_device_not_pow2_enqueue(queue: api.Queue, device: api.Device, host: api.Device) -> None:
    _blocked_copy_to_pageable_memory(device)
    _fill_device_bytes(queue, device, host, MIXED_3, 3 * 341, block=True)


def test_success_mixed_bytes_device_not_pow2_enqueue_page_locked(queue: api.Queue, device: api.Device,
                                                                  host: api.Device) -> None:
    _fill_device_bytes(queue, device, host, MIXED_3, 3 * 341, block=True, page_locked=True)


def test_success_mixed_bytes_device_oversized(queue: api.Queue, device: api.Device, host: api.Device) -> None:
    _fill_device_bytes(queue, device, host, OVERSIZED_32, 32 * 32)


def test_success_mixed_bytes_device_oversized_enqueue(queue: api.Queue, device: api.Device,
                                                      host: api.Device) -> None:
    _blocked_copy_to_pageable_memory(device)
    _fill_device_bytes(queue, device, host, OVERSIZED_32, 32 * 32, block=True)


def test_success_mixed_bytes_device_oversized_enqueue_page_locked(queue: api.Queue, device: api.Device,
                                                                  host: api.Device) -> None:
    _fill_device_bytes(queue, device, host, OVERSIZED_32, 32 * 32, block=True, page_locked=True)
