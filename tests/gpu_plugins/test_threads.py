"""Every operation from any thread, on any device: the plugin makes the right device current (a
CUDA context, a HIP device) on whatever thread calls it, and the stand-ins refuse work placed on
the wrong one."""

from __future__ import annotations

import threading

import gpu_fixtures
from conftest import run_threads
from gpu_fixtures import KERNEL, WAIT, Runtime, gpu_device, host_buffer, in_new_thread, launch_size, recorder

from offloadrt import AllocType, EventInfo, api

from .vendors import Vendor


def exercise(vendor: Vendor, rt: Runtime, device: api.Device, tag: int) -> None:
    """Every kind of operation on ``device``, checked: the stand-in makes memory, streams, events
    and modules on the calling thread's current device and refuses a launch on another's stream.
    Each tag has a kernel of its own, so that threads may exercise devices at once."""
    ordinal = gpu_device(device).device_id
    seen, body = recorder()
    name = f"record{tag}"
    vendor.standin.register_kernel(name, body)
    data = bytes((tag + i) % 256 for i in range(64))
    source, source_address = host_buffer(data)
    target, target_address = host_buffer(64)
    pointer = api.olMemAlloc(device, AllocType.DEVICE, 64)
    state = vendor.standin.state()
    assert state.allocations[pointer].device.ordinal == ordinal  # allocated on this thread's current device
    queue = api.olCreateQueue(device)
    assert state.streams[int(queue._ai.stream)].ctx.device.ordinal == ordinal  # type: ignore[union-attr]
    api.olMemcpy(queue, pointer, device, source_address, rt.host, 64)
    api.olMemFill(queue, pointer + 32, bytes([tag]), 16)
    api.olMemcpy(queue, target_address, rt.host, pointer, device, 64)
    prog = vendor.program(device, vendor.image(kernels=[name]))
    assert {module.ctx.device.ordinal for module in state.modules.values() if name in module.functions} == {ordinal}
    api.olLaunchKernel(queue, device, api.olGetSymbol(prog, name, KERNEL), gpu_fixtures.tag(tag), launch_size())
    ran = threading.Event()
    api.olLaunchHostFunction(queue, lambda _: ran.set())
    event = api.olCreateEvent(queue)
    api.olSyncEvent(event)
    assert api.olGetEventInfo(event, EventInfo.IS_COMPLETE) is True
    api.olSyncQueue(queue)
    assert api.olQueryQueue(queue) is True and ran.is_set()
    assert target.raw == data[:32] + bytes([tag]) * 16 + data[48:]
    assert seen == [(gpu_fixtures.tag(tag), (1, 1, 1), (1, 1, 1), 0, ordinal)]
    api.olDestroyEvent(event)
    api.olDestroyProgram(prog)
    api.olDestroyQueue(queue)
    api.olMemFree(pointer)


def test_every_operation_works_from_a_brand_new_thread(vendor: Vendor, rt: Runtime) -> None:
    for tag, device in enumerate(rt.gpus + rt.gpus):
        in_new_thread(exercise, vendor, rt, device, tag)


def test_two_devices_used_alternately_from_one_new_thread(vendor: Vendor, rt: Runtime) -> None:
    gpu0, gpu1 = rt.gpus
    queue = api.olCreateQueue(gpu0)  # made on the main thread, used from another

    def alternate() -> None:
        for round_ in range(3):
            for tag, device in enumerate((gpu0, gpu1, gpu1, gpu0)):
                exercise(vendor, rt, device, 10 * round_ + tag)
        pointers = [api.olMemAlloc(device, AllocType.DEVICE, 16) for device in (gpu0, gpu1, gpu0, gpu1)]
        owners = [vendor.standin.state().allocations[p].device.ordinal for p in pointers]
        assert owners == [0, 1, 0, 1]
        api.olMemFill(queue, pointers[0], b"\x5a", 16)
        api.olSyncQueue(queue)
        for pointer in pointers:
            api.olMemFree(pointer)

    in_new_thread(alternate)
    assert api.olQueryQueue(queue) is True
    api.olDestroyQueue(queue)


def test_threads_using_both_devices_at_once_each_select_their_device(vendor: Vendor, rt: Runtime) -> None:
    rounds = 3

    def body(index: int) -> None:
        for round_ in range(rounds):
            device = rt.gpus[(index + round_) % 2]  # every thread alternates, half start on each device
            exercise(vendor, rt, device, 10 * index + round_)

    run_threads(6, body, timeout=3 * WAIT)
    assert vendor.standin.diagnostics == [], vendor.standin.diagnostics


def test_a_thread_selects_a_device_once_until_it_switches(vendor: Vendor, rt: Runtime) -> None:
    gpu0, gpu1 = rt.gpus
    buffers = {gpu: api.olMemAlloc(gpu, AllocType.DEVICE, 8) for gpu in (gpu0, gpu1)}
    _keep, source = host_buffer(8)
    for gpu, buffer in buffers.items():  # the copies' temporary streams now exist in each pool
        api.olMemcpy(None, buffer, gpu, source, rt.host, 8)
    order = (gpu0, gpu0, gpu1, gpu1, gpu1, gpu0)

    def alternate(place: bool) -> list[int]:
        before = vendor.count("select")
        for device in order:
            if place:
                api.olMemFree(api.olMemAlloc(device, AllocType.DEVICE, 8))
            else:
                api.olMemcpy(None, buffers[device], device, source, rt.host, 8)
        return [vendor.selected(args) for args in vendor.calls_of("select")[before:]]

    # Stream work selects a device only when the thread switches to it...
    assert in_new_thread(alternate, False) == [0, 1, 0]
    # ...but whatever the driver places on the current device selects it every time, so that other
    # code selecting devices on the same thread cannot misplace an allocation.
    assert in_new_thread(alternate, True) == [0, 0, 1, 1, 1, 0]
    for buffer in buffers.values():
        api.olMemFree(buffer)


def test_an_allocation_lands_on_its_device_after_foreign_code_switched_devices(vendor: Vendor, rt: Runtime) -> None:
    gpu0, gpu1 = rt.gpus
    api.olMemFree(api.olMemAlloc(gpu0, AllocType.DEVICE, 8))  # this thread has gpu0 current
    vendor.select_elsewhere(1)  # another library switches this thread's device behind offloadrt's back
    pointer = api.olMemAlloc(gpu0, AllocType.DEVICE, 64)
    assert vendor.selected(vendor.calls_of("select")[-1]) == 0
    owner = vendor.standin.state().find_locked(pointer, 1)
    assert owner is not None and owner.device.ordinal == 0
    api.olMemFree(pointer)


def test_queues_and_programs_made_on_one_thread_work_from_another(vendor: Vendor, rt: Runtime) -> None:
    gpu0, gpu1 = rt.gpus
    seen, body = recorder()
    vendor.standin.register_kernel("record", body)
    queues = [api.olCreateQueue(gpu) for gpu in (gpu1, gpu0)]  # the main thread ends with gpu0 current
    kernels = [api.olGetSymbol(vendor.program(gpu), "record", KERNEL) for gpu in (gpu1, gpu0)]

    def use() -> None:
        for queue, gpu, kernel in zip(queues, (gpu1, gpu0), kernels):
            api.olLaunchKernel(queue, gpu, kernel, gpu_fixtures.tag(b"x"), launch_size())
            api.olSyncQueue(queue)

    in_new_thread(use)
    use()
    assert [launch[4] for launch in seen] == [1, 0, 1, 0]
    for queue in queues:
        api.olDestroyQueue(queue)
