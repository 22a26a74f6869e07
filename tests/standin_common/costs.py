"""What a driver stand-in's work would have cost on a GPU: counters and a simulated driver time.

TEST DOUBLE, not NVIDIA or AMD code. The stand-ins run on the host, so their own run time says
nothing about a GPU's; instead each simulated driver counts the operations whose price the H100
showed to matter and charges them at the measured prices (/work/shared/reference/
gpu-hardware-facts.md, NVIDIA H100 80GB HBM3, driver 580, cuda-bindings 13.3.1). A plugin test can
then assert "no host function and no timed event where none was asked for" and read what its
calls would have cost. The counters live in the simulated driver, so a reset of the stand-in
(a new process) starts them at zero.

Prices, in microseconds of driver time per operation:

- a host function (``cuLaunchHostFunc``/``hipLaunchHostFunc``): :data:`HOST_FUNCTION_US`, 50. An
  8-byte copy with a host function per copy cost 52-57 us through offloadrt's Python layer against
  1.7-2.4 us for the raw copy ("Per-call costs" table), so the host function is about 50 us;
- a timed event (created without the no-timing flag): :data:`TIMED_EVENT_US`, 7.2, what
  create + record + synchronize + destroy cost with ``CU_EVENT_DEFAULT`` ("Events");
- an untimed event (``CU_EVENT_DISABLE_TIMING``/``hipEventDisableTiming``):
  :data:`UNTIMED_EVENT_US`, 1.8, the same cycle with ``CU_EVENT_DISABLE_TIMING`` ("Events");
- a kernel launch: :data:`LAUNCH_US`, 3.6: 3.62 us (``extra``) and 3.65 us (``kernelParams``) per
  launch of a 4-parameter kernel on one stream ("Kernel parameters").

An event is charged its whole cycle when it is created. The HIP stand-in charges the same
prices: nobody measured them on an AMD GPU. Everything else costs nothing here.
"""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass

HOST_FUNCTION_US = 50.0
TIMED_EVENT_US = 7.2
UNTIMED_EVENT_US = 1.8
LAUNCH_US = 3.6


@dataclass(frozen=True)
class Costs:
    """What a simulated driver has been asked to do so far, and its simulated driver time."""

    host_functions: int = 0  # host functions launched
    timed_events: int = 0  # events created with timing
    untimed_events: int = 0  # events created with the driver's no-timing flag
    launches: int = 0  # kernel launches the driver accepted
    driver_time_us: float = 0.0  # the operations above at the H100's prices


class CostMeter:
    """The running totals of one simulated driver (thread-safe); :meth:`snapshot` reads them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # guards _totals (charged from any calling thread)
        self._totals = Costs()

    def _add(self, field: str, price: float) -> None:
        with self._lock:
            totals = self._totals
            self._totals = dataclasses.replace(totals, **{field: getattr(totals, field) + 1},
                                               driver_time_us=totals.driver_time_us + price)

    def host_function(self) -> None:
        self._add("host_functions", HOST_FUNCTION_US)

    def event(self, timed: bool) -> None:
        if timed:
            self._add("timed_events", TIMED_EVENT_US)
        else:
            self._add("untimed_events", UNTIMED_EVENT_US)

    def launch(self) -> None:
        self._add("launches", LAUNCH_US)

    def snapshot(self) -> Costs:
        with self._lock:
            return self._totals
