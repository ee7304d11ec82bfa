"""What the CPU simulator can run (the launch validator enforces these in simulator launches)."""
from __future__ import annotations

MAX_BLOCK = (1024, 1024, 64)
MAX_THREADS = 1024
MAX_SHARED_BYTES = 227 * 1024      # per block, as Hopper's opt-in maximum
# Blocks of a cooperative grid the simulator runs at once (one lock-step batch, dsl/sim/launch_ops.py):
# its own declared limit, not a GPU's figure (a GPU's is blocks per SM from the occupancy API x SMs).
SIM_MAX_CORESIDENT = 1024
