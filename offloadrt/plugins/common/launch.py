"""Launch shapes: which (num_groups, group_size, dynamic shared memory) a device can run, and why not."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...errors import ErrorCode, OffloadError
from .hooks import Dim3

if TYPE_CHECKING:
    from .device import GenericDevice


def check_launch_shape(device: GenericDevice, num_groups: Dim3, group_size: Dim3, dyn: int) -> None:
    """Raise the error ``launch_size_error`` explains unless ``device`` can run the launch shape: each
    extent at least 1, the group within the device's limits, the work-group memory within its size."""
    gx, gy, gz = num_groups
    bx, by, bz = group_size
    mx, my, mz = device.max_group_dims
    nx, ny, nz = device.max_grid_dims
    items = device.max_items_per_dim
    try:
        valid = (0 < gx <= nx and 0 < gy <= ny and 0 < gz <= nz and 0 < bx <= mx and 0 < by <= my
                 and 0 < bz <= mz and bx * by * bz <= device.max_group_size
                 and gx * bx <= items and gy * by <= items and gz * bz <= items
                 and 0 <= dyn <= device.max_local_memory
                 and (gx | gy | gz | bx | by | bz | dyn) >= 0)  # ints only
    except TypeError:
        valid = False
    if not valid:
        raise launch_size_error(device, num_groups, group_size, dyn)


def launch_size_error(device: GenericDevice, num_groups: Dim3, group_size: Dim3, dyn: object) -> OffloadError:
    """The error that says which rule a launch shape breaks."""
    values = (*num_groups, *group_size, dyn)
    if not all(type(v) is int or type(v) is bool for v in values):
        return OffloadError(ErrorCode.INVALID_ARGUMENT,
                            f"launch sizes must be integers: num_groups={num_groups}, group_size={group_size}, "
                            f"dyn_shared_memory={dyn!r}")
    if min(values[:6]) < 1:
        return OffloadError(ErrorCode.INVALID_SIZE,
                            f"launch dimensions must be positive: num_groups={num_groups}, group_size={group_size}")
    if any(g > limit for g, limit in zip(num_groups, device.max_grid_dims)):
        return OffloadError(ErrorCode.INVALID_SIZE,
                            f"num_groups {num_groups} exceeds the device's grid limit {device.max_grid_dims}")
    if any(g * b > device.max_items_per_dim for g, b in zip(num_groups, group_size)):
        return OffloadError(ErrorCode.INVALID_SIZE,
                            f"num_groups {num_groups} x group_size {group_size} exceeds the device's "
                            f"{device.max_items_per_dim} work items per dimension")
    if isinstance(dyn, int) and not 0 <= dyn <= device.max_local_memory:
        return OffloadError(ErrorCode.INVALID_SIZE,
                            f"dynamic shared memory {dyn} is outside 0..{device.max_local_memory}, the device's "
                            f"work-group memory")
    return OffloadError(ErrorCode.INVALID_SIZE,
                        f"group size {group_size} exceeds the device limit {device.max_group_dims} / "
                        f"{device.max_group_size} items")
