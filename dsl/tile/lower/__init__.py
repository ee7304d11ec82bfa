"""Tile IR -> typed SIMT IR, grouped by what is lowered: the kernel frame and tile ownership
(kernel.py, tiles.py), elementwise and shape expressions, reductions (reduce.py), stores (store.py),
fragments and shared memory (frags.py, shared.py, layout.py), loops (loops.py) with the prefetch
pipeline that feeds their products (pipeline.py), and matrix products (matmul/). PTX is never
written here: instructions come from the table of dsl/tile/ptx/, and no module of this package
imports the simulator. The driver (driver.py: lowering again while layouts settle or shared memory
does not fit) runs the Lowerer of kernel.py; the imports run one way, down from there: a module lower
down reaches a higher one through the Lowerer object it is passed, never by importing it."""
from dsl.tile.lower.errors import LoweringError
from dsl.tile.lower.driver import lower, pick_threads
from dsl.tile.lower.kernel import lowered_params

__all__ = ["LoweringError", "lower", "lowered_params", "pick_threads"]
