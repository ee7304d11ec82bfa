"""dsl.vocab — the DSL's declarative vocabulary: the one math table (dsl/vocab/math.py) from which the
SIMT and tile front ends, the back end, both simulators (dsl/vocab/host.py) and the docs' lists
(dsl/vocab/docs.py) are derived. The element-type table is bridge/dtypes.py (dsl reads it)."""
from dsl.vocab.math import (FLOAT, PREDICATE, ROUNDING, Lowering, MathIntrinsic, VocabularyError,
                            fcmp, libdevice, llvm, register_math, unregister_math)

__all__ = ["MathIntrinsic", "Lowering", "llvm", "libdevice", "fcmp", "FLOAT", "PREDICATE", "ROUNDING",
           "register_math", "unregister_math", "VocabularyError"]
