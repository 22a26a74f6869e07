"""Distributed saxpy: each MPI rank computes its slice on its own device, and the ranks reduce the result.

    mpiexec -n 2 python examples/mpi_saxpy.py

Rank r takes the r-th GPU (round robin), or the host device where there is none. The slices go
back to the host in host memory of offloadrt (an Array of the host device), which MPI reads in
place: host-reachable offloadrt buffers and arrays are ordinary MPI buffers.
"""

import numpy as np
from kernels import build
from mpi4py import MPI

import offloadrt

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
gpus = [d for d in offloadrt.devices() if d.type == offloadrt.DeviceType.GPU]
device = gpus[rank % len(gpus)] if gpus else offloadrt.device("host")
saxpy = device.load(build("saxpy", device)).kernel("saxpy")
saxpy.signature = ("float32", "ptr", "ptr", "uint32")

n, a = 1 << 20, 2.0
x = np.linspace(0, 1, n, dtype=np.float32)  # every rank knows the inputs; each computes its slice
y = np.ones(n, dtype=np.float32)
counts = [n // size + (r < n % size) for r in range(size)]
start = sum(counts[:rank])
mine = slice(start, start + counts[rank])

dx, dy = offloadrt.asarray(x[mine], device), offloadrt.asarray(y[mine], device)
with device.queue() as queue:
    queue.launch(saxpy, (counts[rank] + 255) // 256, 256, a, dx, dy, counts[rank])
part = offloadrt.asarray(dy, "host")  # host memory: MPI sends from it directly

result = np.empty(n, dtype=np.float32)
comm.Allgatherv(part, (result, counts))  # every rank gets the whole y
total = comm.allreduce(float(np.asarray(part, dtype=np.float64).sum()), op=MPI.SUM)

assert np.allclose(result, a * x + y)
assert np.isclose(total, float((a * x.astype(np.float64) + y).sum()), rtol=1e-5)
if rank == 0:
    print(f"saxpy on {size} ranks: ok (sum {total:.1f})")
print(f"rank {rank}: {counts[rank]} elements on {device}")
