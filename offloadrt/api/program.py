"""Programs: load (a private copy of the image), unload at once, validity checks."""

from __future__ import annotations

from ..errors import ErrorCode, OffloadError
from ._entry import entry_point
from ._state import Context, shut_down_meanwhile
from .handles import Device, Program, live_device, live_program, payload


@entry_point
def olCreateProgram(ctx: Context, device: Device, image: bytes) -> Program:
    """Load ``image`` on ``device``. The bytes are copied; the caller's buffer is not kept."""
    gdev = live_device(device)
    data = payload(image, "image")
    assert isinstance(device, Device)
    loaded = gdev.load_binary(data)
    program = Program(device, loaded)
    with device.lock:
        closed = device.closed
        if not closed:
            device.programs.add(program)
    if closed:
        program._image = None
        gdev.unload_binary(loaded)
        raise shut_down_meanwhile("olCreateProgram")
    return program


@entry_point
def olDestroyProgram(ctx: Context, program: Program) -> None:
    """Unload the program from its device now; its symbols become invalid."""
    live_program(program)
    assert isinstance(program, Program)
    device = program.device
    gdev = live_device(device)
    with device.lock:  # claim the handle: of two racing destroys, one wins
        image = program._image
        if image is None:
            raise OffloadError(ErrorCode.INVALID_ARGUMENT, f"program {program!r} has been destroyed")
        program._image = None
        device.programs.discard(program)
    gdev.unload_binary(image)


@entry_point
def olIsValidBinary(ctx: Context, device: Device, image: bytes) -> bool:
    """Whether ``device`` could load ``image``; answers without loading it."""
    gdev = live_device(device)
    data = payload(image, "image")
    return gdev.is_valid_binary(data)
