"""Front end of the SIMT DSL: Python AST → typed IR (dsl.ir), with type inference, safety checks,
range proofs, fault-site numbering and diagnostics.

Entry points (used by dsl.compiler and dsl.simt):
- `build_ir(pyfunc, signature, options, is_kernel=True)` → dsl.ir.nodes.Function
- `parse_signature_annotations(pyfunc)` → what each parameter declares (ParamAnnotation)
- `contract_for(fn_ir, options)` → bridge.contract.LaunchContract (`contract_dict` gives the JSON dict)

Stages inside: source.py (AST + positions) → annotations.py → lower.py (a NodeVisitor split into
stmts/loops/exprs/calls/access mixins) using typing_rules.py, proofs.py and conditions.py.
"""
from __future__ import annotations

from typing import Callable

from dsl.errors import DslCompileError
from dsl.frontend.annotations import ParamAnnotation, parse_signature_annotations
from dsl.frontend.context import BuildContext
from dsl.frontend.contract import contract_dict, contract_for, validate_requires
from dsl.frontend.lower import lower_function
from dsl.frontend.scope import closure_vars
from dsl.ir import nodes as ir
from dsl.ir import types as irt
from dsl.options import KernelOptions

__all__ = ["build_ir", "parse_signature_annotations", "contract_for", "contract_dict",
           "ParamAnnotation", "closure_vars", "validate_requires"]


def build_ir(pyfunc: Callable, signature: list[irt.Type], options: KernelOptions, *,
             is_kernel: bool = True) -> ir.Function:
    """Lower `pyfunc` for one concrete signature (one IR type per parameter, TypeVars resolved)."""
    if is_kernel:
        validate_requires(pyfunc, options)
    ctx = BuildContext(options)
    try:
        return lower_function(pyfunc, list(signature), ctx, is_kernel=is_kernel)
    except DslCompileError:
        raise
    except Exception as exc:   # noqa: BLE001 - outside any statement (parameters, facts): at the def
        from dsl.source import get_source
        from dsl.frontend.stmts import internal_error_text
        get_source(pyfunc).error(None, *internal_error_text(exc))
