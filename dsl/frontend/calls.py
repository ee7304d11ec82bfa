"""Calls: the one table of simt intrinsics, Python builtins, math functions, casts, device functions.

INTRINSICS maps an intrinsic key (dsl/vocab/simt.py) to the method that lowers it; keys
"math.<name>" are the rows of the math table (dsl/vocab/math.py), which also gives the arity, the
typing rule and the Python `math` aliases. BUILTINS maps Python builtins to their methods.
"""
from __future__ import annotations

import ast
import builtins
from typing import Any

from dsl.frontend import typing_rules as tr
from dsl.frontend.ownership import check_owner_options
from dsl.frontend.values import PyObj, SlotBinding, StrideVal, TupleVal, Val, weak_const
from dsl.typevars import TypeVarMismatch, bind_dtype
from dsl.ir import nodes as ir
from dsl.ir import types as irt
from dsl.vocab import simt as si
from dsl.vocab.simt import Intrinsic, Register
from dsl.types import ScalarDType
from dsl.vocab import math as vocab
from dsl.vocab.atomics import atomic_dtype_ok, atomic_dtypes_text
from dsl.vocab.launch import keys as launch_keys
from dsl.vocab.numpy_calls import numpy_call_hint

INTRINSICS: dict[str, str] = {
    "thread.index_1d": "call_index", "thread.index_2d": "call_index", "thread.index_3d": "call_index",
    "thread.chunk_1d": "call_chunk", "thread.chunk_2d": "call_chunk", "thread.chunk_3d": "call_chunk",
    "lane_id": "call_lane_id", "sync_threads": "call_sync_misplaced",
    "unsafe": "call_unsafe_misplaced", "shared.array": "call_shared_misplaced",
    "shared.dynamic": "call_shared_misplaced",
    **{i.key: "call_atomic" for i in vars(si.atomic).values() if isinstance(i, Intrinsic)},
    **{i.key: "call_warp" for i in vars(si.warp).values() if isinstance(i, Intrinsic)},
    "warp.index_1d": "call_owner_index", "block.index_1d": "call_owner_index",
    "warp.lanes": "call_stride", "block.threads": "call_stride", "warp.group": "call_group_make",
    "warp.rows": "call_rows", "block.rows": "call_rows", "range": "call_range_misplaced",
    **{key: "call_launch" for key in launch_keys()},     # dsl/vocab/launch.py (dsl/frontend/launch.py)
}
BUILTINS: dict[Any, str] = {
    builtins.len: "call_len", builtins.min: "call_minmax", builtins.max: "call_minmax",
    builtins.abs: "call_abs", builtins.bool: "call_bool", builtins.int: "call_unsized",
    builtins.float: "call_unsized", builtins.range: "call_range_misplaced",
    builtins.print: "call_print",
}


class CallMixin:
    def visit_Call(self, node: ast.Call) -> Any:
        if node.keywords:
            self.err(node.keywords[0].value, "keyword arguments are not supported in kernel calls",
                     "pass arguments by position")
        if isinstance(node.func, ast.Attribute):
            base = self.expr(node.func.value)
            if isinstance(base, Val) and isinstance(base.type, irt.ArrayType):
                if node.func.attr == "get_mut":
                    return self.get_mut(base, node.args, node)
            if isinstance(base, SlotBinding):
                if node.func.attr == "set":
                    self.err(node, "slot.set(...) is a statement, not a value",
                             "write it on its own line")
                self.err(node.func, f"slots have no method '{node.func.attr}'", "use slot.set(v)")
        func = self.expr(node.func)
        if not isinstance(func, PyObj):
            self.err(node.func, f"{self.describe(func)} is not callable")
        return self.call_object(func.obj, node)

    def call_object(self, obj: Any, node: ast.Call) -> Any:
        if isinstance(obj, Intrinsic):
            if obj.key.startswith("math."):
                return self.call_math(obj.key, node)
            return getattr(self, INTRINSICS[obj.key])(obj.key, node)
        if isinstance(obj, ScalarDType):
            return self.call_cast(obj, node)
        if hasattr(type(obj), "_dsl_call_"):   # @simt.device, extern device functions, kernels (refused)
            return obj._dsl_call_(self, node)
        if isinstance(obj, Register):
            self.err(node.func, f"simt.{obj.public} is a value, not a function", "drop the ()")
        try:
            py_math = vocab.python_functions().get(obj)
            handler = BUILTINS.get(obj)
        except TypeError:                      # an unhashable object: not a function we know
            py_math = handler = None
        if py_math is not None:
            return self.math_call(py_math, self.scalars(node.args), node)
        if handler is not None:
            return getattr(self, handler)(obj, node)
        name = getattr(obj, "__name__", repr(obj))
        foreign = numpy_call_hint(obj, "simt")       # np.sqrt: name simt.sqrt, not @simt.device
        if foreign is not None:
            self.err(node.func, *foreign)
        if getattr(obj, "__module__", None) == "builtins" or isinstance(obj, type):
            self.err(node.func, f"the Python builtin '{name}' is not supported in kernels",
                     "kernels support len, range (in for loops), min, max, abs, bool and the dsl "
                     "casts; write a loop for the rest")
        if callable(obj):
            self.err(node.func, f"calling the plain Python function '{name}' from a kernel",
                     f"decorate '{name}' with @simt.device to make it callable from kernels")
        self.err(node.func, f"{obj!r} is not callable")

    # ------------------------------------------------------------------ helpers
    def arity(self, node: ast.Call, *counts: int) -> None:
        if len(node.args) not in counts:
            want = " or ".join(map(str, counts))
            self.err(node, f"expected {want} argument{'s' if counts != (1,) else ''}, "
                     f"got {len(node.args)}")

    def scalars(self, args: list[ast.expr]) -> list[Val]:
        return [self.scalar(a, "the argument") for a in args]

    def const_int(self, node: ast.expr, what: str) -> int:
        v = self.expr(node)
        if not (isinstance(v, Val) and v.weak and isinstance(v.const_value, int)):
            self.err(node, f"{what} must be a constant integer",
                     "use a literal or a module-level constant")
        return v.const_value

    # ------------------------------------------------------------------ builtins
    def call_cast(self, dtype: ScalarDType, node: ast.Call) -> Val:
        self.arity(node, 1)
        t, loc = dtype.ir, self.loc(node)
        if t.kind == "bool":
            return Val(self.to_bool(node.args[0]))
        v = self.scalar(node.args[0], f"the argument of {t.name}()")
        if v.weak:
            if t.is_int and not tr.fits(int(v.const_value), t):
                self.err(node, f"{v.const_value!r} does not fit in {t}")
            return Val(tr.const_of(v.const_value, t, loc))
        return Val(tr.cast(v.expr, t, loc))

    def call_bool(self, obj: Any, node: ast.Call) -> Val:
        self.arity(node, 1)
        return Val(self.to_bool(node.args[0]))

    def call_unsized(self, obj: Any, node: ast.Call) -> Val:
        self.err(node.func, f"{obj.__name__}() has no fixed width in kernels",
                 "cast with a dsl type: i32(x), i64(x), f32(x) or f64(x)")

    def call_range_misplaced(self, obj: Any, node: ast.Call) -> Val:
        self.err(node, "range() can only be used as the iterable of a `for` loop",
                 "write `for i in range(n):`")

    def call_print(self, obj: Any, node: ast.Call) -> Val:
        self.err(node, "print() is not supported in kernels",
                 "write values into an output array, or run kernel.simulate(...) and inspect it")

    def call_len(self, obj: Any, node: ast.Call) -> Val:
        self.arity(node, 1)
        v = self.expr(node.args[0])
        if isinstance(v, TupleVal):
            return weak_const(len(v.items), self.loc(node))
        if not (isinstance(v, Val) and isinstance(v.type, irt.ArrayType)):
            self.err(node.args[0], f"len() needs an array, got {self.describe(v)}")
        return self.extent(v, 0, self.loc(node))

    def call_minmax(self, obj: Any, node: ast.Call) -> Val:
        name = obj.__name__
        if len(node.args) < 2:
            self.err(node, f"{name}() needs at least two numbers in kernels")
        vals = self.scalars(node.args)
        result = vals[0]
        for v in vals[1:]:
            if result.weak and v.weak:
                result = weak_const((min if name == "min" else max)(result.const_value, v.const_value),
                                    self.loc(node))
                continue
            t = self.rule(node, tr.unify, result, v)
            loc = self.loc(node)
            result = Val(ir.BinOp(name, self.rule(node, tr.convert, result, t, loc),
                                  self.rule(node, tr.convert, v, t, loc), t, loc))
        return result

    def call_abs(self, obj: Any, node: ast.Call) -> Val:
        self.arity(node, 1)
        v = self.scalar(node.args[0], "the argument of abs()")
        if v.weak:
            return weak_const(abs(v.const_value), self.loc(node))
        t = irt.compute_type(v.scalar) if v.scalar.kind != "bool" else irt.I64  # type: ignore[union-attr,arg-type]
        return Val(ir.UnaryOp("abs", tr.cast(v.expr, t, self.loc(node)), t, self.loc(node)))

    def call_math(self, key: str, node: ast.Call) -> Val:
        """`simt.<name>(...)`: a row of the math table (which may have been removed since)."""
        name = key[len("math."):]
        if vocab.get(name) is None:
            self.err(node.func, f"simt.{name} is no longer a math function (it was removed from the "
                     "math table, dsl/vocab/math.py)")
        return self.math_call(name, self.scalars(node.args), node)

    def math_call(self, fn: str, args: list[Val], node: ast.AST) -> Val:
        """Math on f32/f64 (ints convert like `/`, f16/bf16 compute in f32 and convert back); the
        arity and result typing come from the function's row in dsl/vocab/math.py."""
        row = vocab.get(fn)
        assert row is not None, fn
        if len(args) != row.arity:
            self.err(node, f"{fn}() takes {row.arity} argument{'s' if row.arity > 1 else ''}, "
                     f"got {len(args)}")
        loc = self.loc(node)
        if all(v.weak for v in args):
            t = irt.F32
        else:
            first = next(v for v in args if not v.weak)
            t = first.scalar
            for v in args:
                if v is not first:
                    t = self.rule(node, tr.unify, Val(ir.Const(0, t, loc)), v)
        if t.kind == "bool":
            self.err(node, f"{fn}() needs a number, got bool")
        ct = tr.math_arg_type(t)
        exprs = [self.rule(node, tr.convert, v, ct, loc) for v in args]
        if row.typing == vocab.PREDICATE:
            return Val(ir.Math(fn, exprs, irt.BOOL, loc))
        result: ir.Expr = ir.Math(fn, exprs, ct, loc)
        if t.is_float and t != ct:
            result = ir.Cast(result, t, loc)
        return Val(result)

    # ------------------------------------------------------------------ thread intrinsics
    def call_index(self, key: str, node: ast.Call) -> Val:
        self.arity(node, 0)
        n = int(key[-2])
        if self.is_kernel and n != self.options.domain:
            self.err(node, f"simt.thread.index_{n}d() in a kernel declared with domain="
                     f"{self.options.domain}", f"declare @simt.kernel(domain={n}, ...) or use "
                     f"simt.thread.index_{self.options.domain}d()")
        return Val(ir.ThreadIndexValue(n, self.loc(node)))

    def call_chunk(self, key: str, node: ast.Call) -> Val | TupleVal:
        """chunk_1d(n): the chunk; chunk_2d / chunk_3d(n): the row's ThreadIndex components, then the
        chunk along the last axis (`r, ch = simt.thread.chunk_2d(4)`)."""
        self.arity(node, 1)
        nd = int(key[-2])
        n = self.const_int(node.args[0], "the chunk size")
        if not 1 <= n <= 64:
            self.err(node.args[0], f"chunk size {n} must be between 1 and 64")
        if self.is_kernel and self.options.domain != nd:
            self.err(node, f"simt.thread.chunk_{nd}d() in a kernel declared with domain={self.options.domain}",
                     f"declare @simt.kernel(domain={nd}, ...)" if nd > 1 or self.options.domain > 1
                     else "declare @simt.kernel(domain=1)")
        loc = self.loc(node)
        chunk = Val(ir.ChunkValue(n, loc, nd))
        if nd == 1:
            return chunk
        index = ir.ThreadIndexValue(nd, loc)
        return TupleVal([*(Val(ir.TupleGet(index, k, irt.INDEX, loc)) for k in range(nd - 1)), chunk])

    def refuse_in_stride_loop(self, what: str, node: ast.AST) -> None:
        """Lanes run different numbers of iterations of a lanes / threads loop (n not a multiple of
        the group), so a warp operation there would miss lanes."""
        scope = getattr(self, "stride_scope", None)
        if scope is not None:
            loop = {"warp": "simt.warp.lanes(n)", "block": "simt.block.threads(n)"}.get(
                scope, f"simt.warp.group({ir.scope_width(scope)}).lanes(n)")
            self.err(node, f"{what} inside a `for .. in {loop}` loop: lanes run different numbers of "
                     "iterations when n is not a multiple of the group, so not every lane would take part",
                     f"reduce inside the loop into a local, then call {what} after the loop")

    def call_owner_index(self, key: str, node: ast.Call) -> Val:
        """`simt.warp.index_1d()` / `simt.block.index_1d()`: the unforgeable index of the warp (block),
        which owns row (element) `w` of a DisjointSlice (dsl/frontend/ownership.py)."""
        return self.owner_index(key.split(".")[0], node)

    def owner_index(self, scope: str, node: ast.Call) -> Val:
        """The index of the group `scope` ("warp", "group<n>", "block"), in a kernel whose options let
        it own rows (a device function's claims are checked where the kernel takes them)."""
        self.arity(node, 0)
        if self.is_kernel:
            check_owner_options(scope, self.options, self.src.span(node))
        return Val(ir.TupleGet(ir.OwnerIndexValue(scope, self.loc(node)), 0, irt.INDEX, self.loc(node)))

    def call_stride(self, key: str, node: ast.Call) -> StrideVal:
        """`simt.warp.lanes(n)` / `simt.block.threads(n)`: iterated by a `for` loop (dsl/frontend/loops.py)."""
        self.arity(node, 1)
        v = self.scalar(node.args[0], "the stop")
        if v.scalar.kind == "bool" or not v.scalar.is_int:   # type: ignore[union-attr]
            self.err(node.args[0], f"{key}(n) needs an integer n, got {v.scalar}")
        loc = self.loc(node)
        stop = tr.convert(v, irt.INDEX, loc) if v.weak else tr.cast(v.expr, irt.INDEX, loc)
        return StrideVal(key.split(".")[0], stop)

    def call_rows(self, key: str, node: ast.Call) -> StrideVal:
        """`simt.warp.rows(n)` / `simt.block.rows(n)`: the rows this warp (block) owns when the launch's
        warps (blocks) stride over n rows: its index, + the number of them in the launch, ... < n."""
        return self.rows_of(key.split(".")[0], key, node)

    def rows_of(self, scope: str, key: str, node: ast.Call) -> StrideVal:
        """The rows loop of the group `scope` (`key` names the call in errors)."""
        if self.is_kernel:
            check_owner_options(scope, self.options, self.src.span(node))
        return StrideVal(scope, self.call_stride(key, node).stop, rows=True)

    def call_lane_id(self, key: str, node: ast.Call) -> Val:
        self.arity(node, 0)
        return Val(ir.Special("laneid", self.loc(node)))

    def call_sync_misplaced(self, key: str, node: ast.Call) -> Val:
        self.err(node, "simt.sync_threads() is a statement, not a value", "call it on its own line")

    def call_unsafe_misplaced(self, key: str, node: ast.Call) -> Val:
        self.err(node, "simt.unsafe() is a context manager", "write `with simt.unsafe():`")

    def call_shared_misplaced(self, key: str, node: ast.Call) -> Val:
        self.err(node, f"simt.{key}(...) must be assigned to a name",
                 f"write `buf = simt.{key}(...)` inside `with simt.unsafe():`")

    # ------------------------------------------------------------------ atomics and warp ops
    def call_atomic(self, key: str, node: ast.Call) -> Val:
        op = key.removeprefix("atomic.")
        want = 4 if op == "cas" else 3
        if len(node.args) != want:
            self.err(node, f"simt.atomic.{op}(array, index, {'compare, value' if op == 'cas' else 'value'})"
                     f" takes {want} arguments, got {len(node.args)}")
        if self.unsafe_depth == 0:
            self.err(node, f"simt.atomic.{op}() writes memory other threads may write too",
                     "atomics go inside `with simt.unsafe():`")
        base = self.expr(node.args[0])
        if not (isinstance(base, Val) and isinstance(base.type, irt.ArrayType)):
            self.err(node.args[0], f"atomics need an array, got {self.describe(base)}")
        t: irt.ArrayType = base.type  # type: ignore[assignment]
        from dsl.frontend.access import array_name
        if not self.writable(base):
            self.err(node.args[0], f"write to Array parameter '{array_name(base.expr)}' "
                     "(simt.Array is read-only)", "declare it as simt.DisjointSlice[...] to update it "
                     "atomically")
        if not atomic_dtype_ok(op, t.dtype):
            self.err(node, f"simt.atomic.{op}() is not available for {t.dtype} arrays",
                     f"atomic {op} works on {atomic_dtypes_text(op)} (dsl/vocab/atomics.py)")
        vals, _ = self.index_vals(node.args[1])
        self.check_rank(base, node.args[0], len(vals), node)
        exprs = self.index_exprs(vals, node.args[1])
        args = [self.rule(node, tr.implicit, self.scalar(a, "the value"), t.dtype, self.loc(a),
                          "the atomic operand") for a in node.args[2:]]
        check, site = self.check_mode(base, exprs, node)
        return Val(ir.Atomic(op, base.expr, exprs, args, check, site, t.dtype, self.loc(node)))

    def call_warp(self, key: str, node: ast.Call) -> Val:
        op = key.removeprefix("warp.")
        loc = self.loc(node)
        if getattr(self, "guarded_depth", 0):
            # Threads past the end skip the whole guarded statement, so only part of the warp would
            # reach the shuffle/vote: undefined behaviour on the GPU (the simulator refuses it too).
            self.err(node, f"simt.warp.{op}() inside a guarded DisjointSlice write: threads past the end "
                     "skip the whole statement, so not every lane of the warp would take part",
                     f"compute it into a local first (`v = simt.warp.{op}(...)`), then write `out[i] = v`")
        self.refuse_in_stride_loop(f"simt.warp.{op}()", node)
        if op in ("ballot", "any", "all"):
            self.arity(node, 1)
            pred = self.to_bool(node.args[0])
            return Val(ir.Warp(op, [pred], irt.U32 if op == "ballot" else irt.BOOL, loc))
        if op in ("max", "min"):       # a butterfly of the whole warp, as a 32-lane group reduces
            self.arity(node, 1)
            v = self.scalar(node.args[0], "the value")
            t = irt.compute_type(v.scalar)  # type: ignore[arg-type]
            if t.kind == "bool":
                self.err(node.args[0], f"simt.warp.{op}() needs a number, got bool")
            return Val(self._reduce(32, op, tr.convert(v, t, loc), t, loc))
        if op == "sum":
            self.arity(node, 1)
            v = self.scalar(node.args[0], "the value")
            t = irt.compute_type(v.scalar)  # type: ignore[arg-type]
            return Val(ir.Warp("sum", [tr.convert(v, t, loc)], t, loc))  # type: ignore[arg-type]
        value, t, lane = self.shuffle_operands(node, f"warp.{op}()")
        return Val(ir.Warp(op, [value, lane], t, loc))

    def shuffle_operands(self, node: ast.Call, what: str) -> tuple[ir.Expr, irt.ScalarType, ir.Expr]:
        """(value, its type, lane as i32) of a shuffle `what(value, lane / delta / mask)`, warp or group."""
        self.arity(node, 2)
        loc = self.loc(node)
        v = self.scalar(node.args[0], "the value")
        t = irt.compute_type(v.scalar)  # type: ignore[arg-type]
        if t.kind == "bool" or t.bits < 32 and not t.is_float:  # type: ignore[union-attr]
            self.err(node.args[0], f"{what} needs a 16/32/64-bit number, got {t}")
        k = self.scalar(node.args[1], "the lane")
        if not k.weak and k.scalar.is_int and k.scalar.kind != "bool":   # type: ignore[union-attr]
            lane = tr.cast(k.expr, irt.I32, loc)    # the hardware reads 5 bits: any integer width is exact
        else:
            lane = self.rule(node, tr.implicit, k, irt.I32, loc, "the lane / delta / mask")
        return tr.convert(v, t, loc), t, lane  # type: ignore[arg-type]

    # ------------------------------------------------------------------ device functions
    def call_device(self, dev: Any, node: ast.Call) -> Val:
        from dsl.frontend.annotations import annotation_of, check_plain_signature, return_annotation
        from dsl.source import get_source
        from dsl.frontend.scope import Scope
        fn = dev.pyfunc
        src = get_source(fn)
        check_plain_signature(src, "device function")
        anns = [annotation_of(src, Scope(fn), a, "parameter") for a in src.tree.args.args]
        if len(node.args) != len(anns):
            self.err(node, f"device function '{fn.__name__}' takes {len(anns)} arguments, "
                     f"got {len(node.args)}")
        args, sig, typevars = [], [], {}
        for ann, a in zip(anns, node.args):
            v = self.expr(a)
            if ann.kind == "array":
                if not (isinstance(v, Val) and isinstance(v.type, irt.ArrayType)) or \
                        v.type.ndim != ann.ndim or (ann.writable and not v.type.writable):
                    self.err(a, f"argument '{ann.name}' of '{fn.__name__}' must be {ann.spelling()}, "
                             f"got {self.describe(v)}")
                dt = v.type.dtype
                t: irt.Type = v.type       # a DisjointSlice passed as simt.Array stays read-only there
                expr = v.expr
            else:
                s = self.as_scalar(v)
                if s is None:
                    self.err(a, f"argument '{ann.name}' of '{fn.__name__}' must be a number, "
                             f"got {self.describe(v)}")
                dt = ann.dtype if not ann.is_generic else typevars.get(ann.dtype, s.scalar)
                expr = self.rule(a, tr.implicit, s, dt, self.loc(a), f"argument '{ann.name}'")
                t = dt
            try:                       # the one binder (dsl/typevars.py), as launch signatures use
                bind_dtype(typevars, ann.dtype, dt)
            except TypeVarMismatch as mismatch:
                if ann.is_generic:
                    self.err(a, f"argument '{ann.name}' binds {ann.dtype} to {dt}, but an earlier "
                             f"argument bound it to {mismatch.expected}")
                self.err(a, f"argument '{ann.name}' of '{fn.__name__}' must have dtype {ann.dtype}, "
                         f"got {dt}")
            args.append(expr)
            sig.append(t)
        ret = return_annotation(fn)
        if ret is not None and not isinstance(ret, irt.Type):
            if ret not in typevars:
                self.err(node, f"return type {ret} of '{fn.__name__}' is not bound by its arguments")
            ret = typevars[ret]
        key = (fn, tuple(sig))
        callee = self.ctx.device_fns.get(key)
        if callee is None:
            if fn in self.ctx.in_progress:
                self.err(node, f"recursive call of device function '{fn.__name__}'",
                         "device functions are inlined: rewrite the recursion as a loop")
            self.ctx.in_progress.add(fn)
            try:
                callee = self.lower_device_function(fn, sig, typevars=typevars, return_type=ret)
            finally:
                self.ctx.in_progress.discard(fn)
            self.ctx.device_fns[key] = callee
        if callee not in self.callees:
            self.callees.append(callee)
        if self.unsafe_depth == 0:       # a call inside `with simt.unsafe():` vouches for its writes
            from dsl.frontend.ownership import mapped
            self.claims += mapped(self.ctx.claims.get(id(callee), []), args, fn.__name__, self.loc(node))
        return Val(ir.Call(callee, args, callee.return_type, self.loc(node)))
