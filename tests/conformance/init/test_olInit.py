"""Port of offload/unittests/OffloadAPI/init/olInit.cpp (no init wrapper in this group).

Not ported: the 2026 ``InvalidSize`` (``ol_init_args_t.Size = 0`` → INVALID_SIZE): Python's
``olInit(platforms)`` takes a sequence of backends, not a struct with a size field.
"""

from __future__ import annotations

from offloadrt import ErrorCode, PlatformBackend, api

from ..conftest import assert_error


def test_success() -> None:
    api.olInit()
    api.olShutDown()


def test_uninitialized() -> None:
    assert_error(ErrorCode.UNINITIALIZED, api.olIterateDevices, lambda device, _: False, None)


def test_repeated_init() -> None:
    for _ in range(10):
        api.olInit()
        api.olShutDown()


def test_with_init_args() -> None:
    """2026 ``WithInitArgs``: Platforms={HOST}, NumPlatforms=1 → the ``platforms`` argument."""
    api.olInit(platforms=[PlatformBackend.HOST])
    api.olShutDown()
