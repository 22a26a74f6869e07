"""The layout of an array in its buffer: C strides, contiguity, the bytes a strided view touches,
basic indexing worked out by NumPy over no memory, and reshaping."""

from __future__ import annotations

import math
import operator
from typing import Any

import numpy as np

from ..errors import ErrorCode, OffloadError


def _c_strides(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    steps, step = [], itemsize
    for extent in reversed(shape):
        steps.append(step)
        step *= max(extent, 1)
    return tuple(reversed(steps))


def _contiguous(shape: tuple[int, ...], strides: tuple[int, ...], itemsize: int) -> bool:
    """Whether elements of ``shape`` at ``strides`` are packed in C order (dimensions of one ignored)."""
    if 0 in shape:
        return True
    step = itemsize
    for extent, stride in zip(reversed(shape), reversed(strides)):
        if extent != 1 and stride != step:
            return False
        step *= extent
    return True


def _strides(strides: Any, shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    items = tuple(strides) if isinstance(strides, (tuple, list)) else (strides,)
    try:
        steps = tuple(map(operator.index, items))
    except TypeError:
        raise OffloadError(ErrorCode.INVALID_ARGUMENT, f"strides are ints (bytes), got {strides!r}") from None
    if len(steps) != len(shape):
        raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                           f"strides {steps} must have one entry per dimension of the shape {shape}")
    if any(step % itemsize for step in steps):
        raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                           f"strides {steps} must be multiples of the element size ({itemsize} bytes)")
    if _contiguous(shape, steps, itemsize):
        return _c_strides(shape, itemsize)
    return steps


def _extent(offset: int, shape: tuple[int, ...], strides: tuple[int, ...], itemsize: int) -> tuple[int, int]:
    """The bytes ``[low, high)`` of the buffer that elements of ``shape`` at ``strides`` from ``offset`` touch."""
    if 0 in shape:
        return offset, offset
    low = high = offset
    for extent, stride in zip(shape, strides):
        reach = (extent - 1) * stride
        if reach < 0:
            low += reach
        else:
            high += reach
    return low, high + itemsize


_PROBES: dict[int, np.ndarray] = {}


def _probe(shape: tuple[int, ...], strides: tuple[int, ...], itemsize: int) -> np.ndarray:
    """A NumPy array with this layout over no memory of its own, for NumPy's basic indexing to work out
    the shape, strides and start of a view. Its elements are never read or written."""
    base = _PROBES.get(itemsize)
    if base is None:
        base = _PROBES[itemsize] = np.empty(1, np.dtype(f"V{itemsize}"))
    return np.lib.stride_tricks.as_strided(base, shape, strides, writeable=False)


def _basic_index(key: Any) -> tuple[Any, ...]:
    """``key`` as a tuple of basic indices (ints, slices, ``...``, ``None``); anything NumPy would
    treat as advanced indexing (it reads the data) is refused."""
    items = key if isinstance(key, tuple) else (key,)
    for item in items:
        if item is None or item is Ellipsis or isinstance(item, slice):
            continue
        if isinstance(item, (int, np.integer)) and not isinstance(item, (bool, np.bool_)):
            continue
        raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                           f"offloadrt arrays take basic indices only (ints, slices, ..., None), got "
                           f"{type(item).__name__} {item!r}; for fancy indexing copy to NumPy (array.get()) or use "
                           f"an array library on the DLPack view")
    return items


def _reshaped(shape: tuple[int, ...], wanted: Any) -> tuple[int, ...]:
    items = tuple(wanted) if isinstance(wanted, (tuple, list)) else (wanted,)
    try:
        extents = [operator.index(item) for item in items]
    except TypeError:
        raise OffloadError(ErrorCode.INVALID_ARGUMENT, f"a shape is ints, got {wanted!r}") from None
    size = math.prod(shape)
    unknown = [i for i, extent in enumerate(extents) if extent == -1]
    if len(unknown) > 1 or any(extent < -1 for extent in extents):
        raise OffloadError(ErrorCode.INVALID_ARGUMENT, f"a shape has one -1 at most and no other negative extents, "
                                                       f"got {tuple(extents)}")
    known = math.prod(extent for extent in extents if extent != -1)
    if unknown:
        if known == 0 or size % known:
            raise OffloadError(ErrorCode.INVALID_SIZE, f"cannot reshape {size} elements into {tuple(extents)}")
        extents[unknown[0]] = size // known
    if math.prod(extents) != size:
        raise OffloadError(ErrorCode.INVALID_SIZE,
                           f"cannot reshape {size} elements of shape {shape} into {tuple(extents)}")
    return tuple(extents)
