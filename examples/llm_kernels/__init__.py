"""DSL ports of cpp/kernels/llm/ (README.md): one module per family, each kernel under its C++ name.

`port(name)` is the DSL kernel of the C++ kernel `name`; `unsafe_blocks(name)` counts the
`with simt.unsafe():` blocks it needs (in its body and the device functions it calls), the number
docs/benchmarks.md and benchmarks/llm_kernels.py report beside its speed.
"""
from __future__ import annotations

import ast
import importlib
import inspect
from typing import Any

FAMILIES: dict[str, tuple[str, ...]] = {
    "layernorm": ("layernorm_forward", "layernorm_backward"),
    "gelu": ("gelu_forward_bf16", "gelu_backward_bf16", "gelu_forward_f32", "gelu_backward_f32"),
    "residual": ("residual_forward",),
    "encoder": ("encoder_forward", "encoder_backward"),
    "crossentropy": ("crossentropy_forward", "crossentropy_backward"),
    "adamw": ("adamw_update",),
    "global_norm": ("global_norm_squared",),
}
KERNELS: dict[str, str] = {k: fam for fam, ks in FAMILIES.items() for k in ks}   # kernel -> family


def family(name: str) -> Any:
    """The module of the family that holds kernel `name`."""
    if name not in KERNELS:
        raise KeyError(f"{name!r} is not a port of a cpp/kernels/llm kernel; ports: {sorted(KERNELS)}")
    return importlib.import_module(f"{__name__}.{KERNELS[name]}")


def port(name: str) -> Any:
    """The DSL kernel (simt or tile) ported from the C++ kernel `name`."""
    return getattr(family(name), name)


def _is_unsafe(node: ast.With) -> bool:
    return any(ast.unparse(item.context_expr) == "simt.unsafe()" for item in node.items)


def unsafe_blocks(name: str) -> int:
    """`with simt.unsafe():` blocks in kernel `name` and the functions of its module it calls."""
    tree = ast.parse(inspect.getsource(family(name)))
    funcs = {f.name: f for f in tree.body if isinstance(f, ast.FunctionDef)}
    seen: set[str] = set()
    todo, count = [name], 0
    while todo:
        fn = funcs[todo.pop()]
        if fn.name in seen:
            continue
        seen.add(fn.name)
        for node in ast.walk(fn):
            if isinstance(node, ast.With) and _is_unsafe(node):
                count += 1
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in funcs:
                todo.append(node.func.id)
    return count
