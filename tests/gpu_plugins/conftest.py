"""Fixtures of the shared GPU plugin suite: the vendor under test, and a runtime on its stand-in."""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType

import pytest
from gpu_fixtures import Runtime

from .vendors import VENDORS, Vendor


@pytest.fixture(params=VENDORS, ids=[vendor.name for vendor in VENDORS])
def vendor(request: pytest.FixtureRequest) -> Vendor:
    """Each GPU plugin over its driver stand-in (a test that lists its own cases per vendor
    parametrises this fixture itself, with ``vendors.per_vendor`` and ``indirect=["vendor"]``)."""
    chosen: Vendor = request.param
    return chosen


@pytest.fixture
def rt(vendor: Vendor, monkeypatch: pytest.MonkeyPatch) -> Iterator[Runtime]:
    """A runtime on two default stand-in GPUs of the vendor (CUDA: compute capability 9.0; HIP:
    AMD Instinct MI210, gfx90a:sramecc+:xnack-)."""
    with vendor.runtime(monkeypatch, devices=2) as runtime:
        yield runtime


@pytest.fixture
def standin(vendor: Vendor) -> ModuleType:
    """The vendor's stand-in package (``cuda_standin``, ``hip_standin``)."""
    return vendor.standin
