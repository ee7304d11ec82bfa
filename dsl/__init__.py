"""kernelbridge DSL: Python kernels compiled to PTX through LLVM (docs/dsl.md).

`from dsl import simt, f32` for SIMT kernels; scalar types double as casts inside kernels.
"""
from bridge import __version__   # one version for the distribution (bridge/__init__.py)
from bridge.errors import ConfigurationError, KernelFault
from dsl import simt
from dsl.errors import (DslCacheError, DslCompileError, DslCompileStageError, DslDeclarationError, DslError,
                        DslLinkError, DslSimulationError, DslTargetError, DslToolError)
from dsl.types import (TypeVar, bf16, boolean, f8e4m3fn, f8e5m2, f16, f32, f64, i8, i16, i32, i64, u8,
                       u16, u32, u64)
# tile: `from dsl import tile` is added by the Tile DSL (dsl/tile/)

__all__ = ["simt", "tile",
           # the error tree (dsl/errors.py; docs/dsl.md "Errors") and the runtime's two the DSL raises too
           "DslError", "DslCompileStageError", "DslCompileError", "DslTargetError", "DslLinkError", "DslCacheError",
           "DslDeclarationError", "DslToolError", "DslSimulationError", "KernelFault", "ConfigurationError",
           "TypeVar", "f16", "bf16", "f32", "f64", "i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64", "boolean",
           "f8e4m3fn", "f8e5m2"]
from dsl import tile  # noqa: E402,F401  (Tile DSL, dsl/tile/)


_INTEGRATIONS = {"torch": "dsl.integrations.torch_op", "jax": "dsl.integrations.jax_call"}


def __getattr__(name: str) -> object:
    """`dsl.torch` / `dsl.jax` (docs/integrations.md), imported on first use: `import dsl` never imports
    torch or jax, and neither needs to be installed until its integration is called."""
    if name in _INTEGRATIONS:
        import importlib
        mod = importlib.import_module(_INTEGRATIONS[name])
        globals()[name] = mod
        return mod
    raise AttributeError(f"module 'dsl' has no attribute {name!r}")
