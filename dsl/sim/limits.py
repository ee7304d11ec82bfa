"""What the CPU simulator can run (the launch validator enforces these in simulator launches)."""
from __future__ import annotations

MAX_BLOCK = (1024, 1024, 64)
MAX_THREADS = 1024
MAX_SHARED_BYTES = 227 * 1024      # per block, as Hopper's opt-in maximum
