"""Programs: load (a private copy of the image), unload at once, validity checks."""

from __future__ import annotations

from ._state import Context, entry_point
from .handles import Device, Program, live_device, live_program, payload


@entry_point
def olCreateProgram(ctx: Context, device: Device, image: bytes) -> Program:
    """Load ``image`` on ``device``. The bytes are copied; the caller's buffer is not kept."""
    gdev = live_device(device)
    data = payload(image, "image")
    assert isinstance(device, Device)
    program = Program(device, gdev.load_binary(data))
    with device.lock:
        device.programs.add(program)
    return program


@entry_point
def olDestroyProgram(ctx: Context, program: Program) -> None:
    """Unload the program from its device now; its symbols become invalid."""
    image = live_program(program)
    assert isinstance(program, Program)
    program._image = None
    device = program.device
    with device.lock:
        device.programs.discard(program)
    gdev = live_device(device)
    gdev.unload_binary(image)


@entry_point
def olIsValidBinary(ctx: Context, device: Device, image: bytes) -> bool:
    """Whether ``device`` could load ``image``; answers without loading it."""
    gdev = live_device(device)
    data = payload(image, "image")
    return gdev.is_valid_binary(data)
