"""Tile IR -> typed SIMT IR, grouped by what is lowered: the kernel frame and tile ownership
(kernel.py, tiles.py), elementwise and shape expressions, reductions (reduce.py), stores (store.py),
fragments and shared memory (frags.py, shared.py, layout.py), the cp.async prefetch pipeline
(pipeline.py) and matrix products (matmul/). PTX is never written here: instructions come from the
table of dsl/tile/ptx/, and no module of this package imports the simulator."""
from dsl.tile.lower.kernel import LoweringError, lower, lowered_params, pick_threads

__all__ = ["LoweringError", "lower", "lowered_params", "pick_threads"]
