"""standin_common: the simulated GPU that the driver stand-ins share (a TEST DOUBLE, not vendor code).

tests/cuda_standin (``cuda.bindings.driver``) and tests/hip_standin (hip-python's ``hip.hip``) are
thin vendor front ends over this package: each keeps its driver's names, signatures, argument
conversion and error codes, and hands the work to the same engine. Modules, by responsibility:

- :mod:`.controls`: a failed call (:class:`DriverError`), kernel faults, injected failures and
  registered kernel bodies (:class:`Controls`);
- :mod:`.memory`: allocations in real host memory and registered host memory;
- :mod:`.engine`: devices, contexts, streams with their worker threads, events, sticky faults
  (:class:`State`, one per stand-in instance);
- :mod:`.operations`: the stream work and queries both drivers offer (copies, fills, host
  functions, event records and waits, stream and event sync, query and elapsed time);
- :mod:`.modules`: loaded modules, their functions and globals, and kernel launches;
- :mod:`.arguments`: kernel argument buffers (``extra``, ``kernelParams``) and what each driver
  makes of a buffer whose size does not match the kernel's parameters;
- :mod:`.costs`: what a driver was asked to do (host functions, events, launches) and its
  simulated driver time at the H100's measured prices;
- :mod:`.calls`: the call wrapper's shared half (recording, injected failures, refusals inside
  host functions) and the test controls every stand-in package offers.
"""
