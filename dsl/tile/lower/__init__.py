"""Tile IR -> typed SIMT IR, grouped by what is lowered: the kernel frame and tile ownership
(kernel.py, tiles.py), elementwise and shape expressions, reductions (reduce.py), stores (store.py),
fragments and shared memory (frags.py, shared.py, layout.py), loops (loops.py) with the prefetch
pipeline that feeds their products (pipeline.py), and matrix products (matmul/). PTX is never
written here: instructions come from the table of dsl/tile/ptx/, and no module of this package
imports the simulator. The imports run one way, down from kernel.py (the Lowerer): a module lower
down reaches a higher one through the Lowerer object it is passed, never by importing it."""
from dsl.tile.lower.errors import LoweringError
from dsl.tile.lower.kernel import lower, lowered_params, pick_threads

__all__ = ["LoweringError", "lower", "lowered_params", "pick_threads"]
