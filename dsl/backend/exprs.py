"""Expression lowering (mixed into ModuleBuilder): arithmetic, comparisons, casts, math, warp ops,
special registers, calls. See builder.py for the semantics chosen for integer corner cases."""
from __future__ import annotations

from typing import Any

import llvmlite.ir as ir
import numpy as np

from dsl.backend import intrinsics as X
from dsl.backend import lltypes as T
from dsl.backend.errors import CodegenError
from dsl.backend.values import SlotVal, TupleVal, leaves
from dsl.ir import nodes as N
from dsl.ir.types import F8_FORMATS, F32, ScalarType

_HALF = ("f16", "bf16")


class ExprMixin:
    # ------------------------------------------------------------------ dispatch
    def expr(self, e: N.Expr) -> Any:
        method = getattr(self, "visit_" + type(e).__name__, None)
        if method is None:
            raise CodegenError(f"no code generation for expression {type(e).__name__}", e.loc)
        return method(e)

    def _fm(self) -> tuple[str, ...]:
        return ("fast",) if self.opts.fastmath else ("contract",) if self.opts.contract else ()

    def const(self, t: ScalarType, value) -> ir.Constant:
        if t.kind == "bool":
            return ir.Constant(T.I1, int(bool(value)))
        if t.is_f8:          # the value's f8 bits (a tile load's zero padding, for one)
            from bridge import dtypes
            bits = np.asarray(float(value), np.float32).astype(dtypes.to_numpy(t.name)).view(np.uint8)
            return ir.Constant(T.I8, int(bits))
        if t.is_float:
            return ir.Constant(T.scalar(t), float(value))
        v = int(value) & ((1 << t.bits) - 1)          # llvmlite wants the two's-complement bits
        return ir.Constant(T.scalar(t), v)

    # ------------------------------------------------------------------ leaves
    def visit_Const(self, e: N.Const):
        return self.const(e.type, e.value)

    def visit_ReadVar(self, e: N.ReadVar):
        return self.read_var(e.var, e.loc)

    def visit_ParamRef(self, e: N.ParamRef):
        return self.st.params[e.param]

    def visit_Special(self, e: N.Special):
        if e.name == "warpsize":
            return ir.Constant(T.I64, X.WARP_SIZE)
        block = self.kernel.exact_block
        if e.name.startswith("ntid.") and block and self.st.fn.export_name is None:
            # .reqntid fixes blockDim: a constant lets LLVM fold it (a block.threads loop's stride)
            return ir.Constant(T.I64, block["xyz".index(e.name[-1])])
        return self.st.b.zext(self.sreg(e.name), T.I64)

    def sreg(self, name: str) -> ir.Value:
        fn = self.declare(X.SPECIAL_REGS[name], T.I32, [])
        fn.attributes.add("nounwind")
        fn.attributes.add("readnone")
        return self.st.b.call(fn, [])

    def thread_index(self, ndim: int) -> list[ir.Value]:
        """Global thread index per axis in array order (the last component comes from x).
        Computed as u32*u32 widened to i64 (mul.wide.u32): exact for every legal grid."""
        b = self.st.b
        out = []
        for ax in "xyz"[:ndim]:
            ctaid, ntid, tid = (b.zext(self.sreg(f"{r}.{ax}"), T.I64) for r in ("ctaid", "ntid", "tid"))
            out.append(b.add(b.mul(ctaid, ntid), tid))
        return out[::-1]

    def visit_ThreadIndexValue(self, e: N.ThreadIndexValue):
        return TupleVal(self.thread_index(e.ndim))

    def visit_OwnerIndexValue(self, e: N.OwnerIndexValue):
        """The warp's (lane group's) global number (x-threads // 32 or // n: they need an exact block
        of whole warps along x, dsl/frontend/ownership.py) or the block's number, as i64."""
        if e.width is None:
            return TupleVal([self.st.b.zext(self.sreg("ctaid.x"), T.I64)])
        shift = e.width.bit_length() - 1
        return TupleVal([self.st.b.lshr(self.thread_index(1)[0], ir.Constant(T.I64, shift))])

    def visit_TupleGet(self, e: N.TupleGet):
        return self.expr(e.value).elems[e.k]

    def visit_MakeTuple(self, e: N.MakeTuple):
        return TupleVal([self.expr(x) for x in e.elems])

    def visit_ChunkValue(self, e: N.ChunkValue):
        return self.st.b.mul(self.thread_index(1)[0], ir.Constant(T.I64, e.n))

    def visit_ChunkStart(self, e: N.ChunkStart):
        return self.expr(e.chunk)

    # ------------------------------------------------------------------ arithmetic
    def visit_BinOp(self, e: N.BinOp):
        t: ScalarType = e.type
        lhs = self.expr(e.lhs)
        if e.op in ("lshift", "rshift"):
            return self.shift(e.op, t, lhs, self.expr(e.rhs), e.rhs.type)
        rhs = self.expr(e.rhs)
        if e.op == "pow":
            return self.power(t, lhs, rhs, e.rhs.type)
        if t.is_float:
            return self.float_binop(e.op, t, lhs, rhs, e.loc)
        return self.int_binop(e.op, t, lhs, rhs, e.loc)

    def float_binop(self, op: str, t: ScalarType, a, b_, loc):
        b, fm = self.st.b, self._fm()
        if op in ("add", "sub", "mul"):       # native half/bfloat ops: identical to f32-then-round
            return {"add": b.fadd, "sub": b.fsub, "mul": b.fmul}[op](a, b_, flags=fm)
        if op in ("min", "max"):
            return self.math_llvm(X.float_op_intrinsic("fmin" if op == "min" else "fmax"), t, [a, b_])
        if op == "copysign":
            return self.math_llvm(X.float_op_intrinsic("copysign"), t, [a, b_])
        if t.name in _HALF:                   # everything else in f32, rounded back once
            r = self.float_binop(op, F32, b.fpext(a, T.scalar(F32)), b.fpext(b_, T.scalar(F32)), loc)
            return b.fptrunc(r, T.scalar(t))
        if op == "truediv":                   # arcp: divisions by one value share one reciprocal (LLVM)
            return b.fdiv(a, b_, flags=fm + (("arcp",) if self.opts.arcp and not self.opts.fastmath else ()))
        if op == "floordiv":                  # Python semantics on floats: floor(a / b)
            return self.math_llvm(X.float_op_intrinsic("floor"), t, [b.fdiv(a, b_, flags=fm)])
        if op == "mod":                       # C fmod: the sign of the dividend
            return self.math_call("fmod", t, [a, b_])
        raise CodegenError(f"operator {op!r} is not defined on {t}", loc)

    def int_binop(self, op: str, t: ScalarType, a, c, loc):
        b = self.st.b
        simple = {"add": b.add, "sub": b.sub, "mul": b.mul, "and_": b.and_, "or_": b.or_, "xor": b.xor}
        if op in simple:
            return simple[op](a, c)
        if op in ("min", "max"):
            pred = "<" if op == "min" else ">"
            cmp = b.icmp_signed(pred, a, c) if t.is_signed else b.icmp_unsigned(pred, a, c)
            return b.select(cmp, a, c)
        if op in ("floordiv", "mod"):
            return self.int_divmod(op, t, a, c)
        raise CodegenError(f"operator {op!r} is not defined on {t}", loc)

    def int_divmod(self, op: str, t: ScalarType, a, d):
        """Truncating division with every corner defined (see builder.py docstring)."""
        b = self.st.b
        ty = a.type
        zero, one, ones = ir.Constant(ty, 0), ir.Constant(ty, 1), ir.Constant(ty, -1)
        is_zero = b.icmp_unsigned("==", d, zero)
        if t.is_signed:
            is_m1 = b.icmp_unsigned("==", d, ones)
            special = b.or_(is_zero, is_m1)
            safe = b.select(special, one, d)
            if op == "floordiv":
                q = b.sdiv(a, safe)
                return b.select(is_zero, zero, b.select(is_m1, b.sub(zero, a), q))
            r = b.srem(a, safe)
            return b.select(is_m1, zero, b.select(is_zero, zero, r))
        safe = b.select(is_zero, one, d)
        if op == "floordiv":
            return b.select(is_zero, zero, b.udiv(a, safe))
        return b.select(is_zero, zero, b.urem(a, safe))

    def shift(self, op: str, t: ScalarType, a, amount, amount_t: ScalarType):
        b = self.st.b
        big = b.icmp_unsigned(">=", amount, ir.Constant(amount.type, t.bits))   # negative -> huge
        n = self.int_resize(amount, amount_t, a.type)
        n = b.and_(n, ir.Constant(a.type, t.bits - 1))
        if op == "lshift":
            return b.select(big, ir.Constant(a.type, 0), b.shl(a, n))
        if t.is_signed:
            fill = b.ashr(a, ir.Constant(a.type, t.bits - 1))
            return b.select(big, fill, b.ashr(a, n))
        return b.select(big, ir.Constant(a.type, 0), b.lshr(a, n))

    def int_resize(self, v, src: ScalarType, ty: ir.IntType):
        b = self.st.b
        if v.type.width == ty.width:
            return v
        if v.type.width > ty.width:
            return b.trunc(v, ty)
        return b.sext(v, ty) if src.is_signed else b.zext(v, ty)

    def power(self, t: ScalarType, base, exp, exp_t: ScalarType):
        b = self.st.b
        if t.is_float and exp_t.is_float:
            return self.math_call("pow", t, [base, exp])
        if t.is_float:                         # float ** int: libdevice powi (exponent as i32)
            e32 = self.int_resize(exp, exp_t, T.I32)
            work = F32 if t.name in _HALF else t
            x = b.fpext(base, T.scalar(F32)) if t.name in _HALF else base
            r = self.call(X.pow_int(work.name), T.scalar(work), [x, e32])
            return b.fptrunc(r, T.scalar(t)) if t.name in _HALF else r
        return self.int_power(t, base, self.int_resize(exp, exp_t, base.type), exp_t.is_signed)

    def int_power(self, t: ScalarType, base, exp, signed: bool):
        """Square-and-multiply, wrapping. A negative exponent gives 0 (1 for base 1, ±1 for -1)."""
        b = self.st.b
        ty = base.type
        head, body, done = self.new_block("ipow.head"), self.new_block("ipow.body"), self.new_block("ipow.done")
        pre = b.block
        neg = b.icmp_signed("<", exp, ir.Constant(ty, 0)) if signed else ir.Constant(T.I1, 0)
        n0 = b.select(neg, ir.Constant(ty, 0), exp)
        pre = b.block
        b.branch(head)
        b.position_at_end(head)
        acc, x, n = b.phi(ty), b.phi(ty), b.phi(ty)
        acc.add_incoming(ir.Constant(ty, 1), pre)
        x.add_incoming(base, pre)
        n.add_incoming(n0, pre)
        b.cbranch(b.icmp_unsigned("!=", n, ir.Constant(ty, 0)), body, done)
        b.position_at_end(body)
        odd = b.trunc(n, T.I1)
        acc2 = b.select(odd, b.mul(acc, x), acc)
        x2, n2 = b.mul(x, x), b.lshr(n, ir.Constant(ty, 1))
        acc.add_incoming(acc2, body)
        x.add_incoming(x2, body)
        n.add_incoming(n2, body)
        b.branch(head)
        b.position_at_end(done)
        # negative exponent: 1 / base**|n| truncated toward zero -> 1 for 1, ±1 for -1, else 0
        one, m1 = ir.Constant(ty, 1), ir.Constant(ty, -1)
        odd_exp = b.trunc(exp, T.I1)
        neg_val = b.select(b.icmp_unsigned("==", base, one), one,
                           b.select(b.icmp_unsigned("==", base, m1), b.select(odd_exp, m1, one),
                                    ir.Constant(ty, 0)))
        return b.select(neg, neg_val, acc)

    def visit_UnaryOp(self, e: N.UnaryOp):
        b, t, v = self.st.b, e.type, self.expr(e.operand)
        if e.op == "neg":
            return b.fneg(v, flags=self._fm()) if t.is_float else b.sub(ir.Constant(v.type, 0), v)
        if e.op in ("not_", "invert"):
            return b.xor(v, ir.Constant(v.type, -1))
        if e.op == "abs":
            if t.is_float:
                return self.math_llvm(X.float_op_intrinsic("fabs"), t, [v])
            if not t.is_signed:
                return v
            return b.select(b.icmp_signed("<", v, ir.Constant(v.type, 0)), b.sub(ir.Constant(v.type, 0), v), v)
        raise CodegenError(f"unknown unary operator {e.op!r}", e.loc)

    _ICMP = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}

    def visit_Compare(self, e: N.Compare):
        b = self.st.b
        t = e.lhs.type
        lhs, rhs = self.expr(e.lhs), self.expr(e.rhs)
        pred = self._ICMP[e.op]
        if t.is_float:
            if e.op == "ne":                   # Python: nan != x is True
                return b.fcmp_unordered(pred, lhs, rhs)
            return b.fcmp_ordered(pred, lhs, rhs)
        if t.is_signed:
            return b.icmp_signed(pred, lhs, rhs)
        return b.icmp_unsigned(pred, lhs, rhs)      # uint and bool

    def visit_Logical(self, e: N.Logical):
        b = self.st.b
        lhs = self.expr(e.lhs)
        start = b.block
        rhs_bb, end = self.new_block(f"{e.op}.rhs"), self.new_block(f"{e.op}.end")
        if e.op == "and":
            b.cbranch(lhs, rhs_bb, end)
        else:
            b.cbranch(lhs, end, rhs_bb)
        b.position_at_end(rhs_bb)
        rhs = self.expr(e.rhs)
        rhs_end = b.block
        b.branch(end)
        b.position_at_end(end)
        phi = b.phi(T.I1)
        phi.add_incoming(ir.Constant(T.I1, int(e.op == "or")), start)
        phi.add_incoming(rhs, rhs_end)
        return phi

    def visit_IfExp(self, e: N.IfExp):
        b = self.st.b
        cond = self.expr(e.cond)
        then_bb, else_bb, end = self.new_block("ifexp.then"), self.new_block("ifexp.else"), self.new_block("ifexp.end")
        b.cbranch(cond, then_bb, else_bb)
        out = []
        for bb, side in ((then_bb, e.then), (else_bb, e.else_)):
            b.position_at_end(bb)
            v = self.expr(side)
            out.append((v, b.block))
            b.branch(end)
        b.position_at_end(end)
        (tv, tb), (ev, eb) = out
        lt, le = leaves(tv), leaves(ev)
        phis = []
        for x, y in zip(lt, le):
            phi = b.phi(x.type)
            phi.add_incoming(x, tb)
            phi.add_incoming(y, eb)
            phis.append(phi)
        from dsl.backend.values import rebuild
        return rebuild(tv, iter(phis))

    def visit_Cast(self, e: N.Cast):
        return self.cast(self.expr(e.operand), e.operand.type, e.type)

    def cast(self, v, src: ScalarType, dst: ScalarType):
        b = self.st.b
        if src == dst:
            return v
        if src.is_f8:
            return self.cast(self.f8_to_f32(v, src), F32, dst)
        if dst.is_f8:
            return self.f32_to_f8(self.cast(v, src, F32), dst)
        dty = T.scalar(dst)
        if dst.kind == "bool":
            if src.is_float:
                return b.fcmp_unordered("!=", v, ir.Constant(v.type, 0.0))
            return b.icmp_unsigned("!=", v, ir.Constant(v.type, 0))
        if src.kind == "bool":
            return b.uitofp(v, dty) if dst.is_float else b.zext(v, dty)
        if src.is_float and dst.is_float:
            if src.name in _HALF and dst.name in _HALF:      # f16 <-> bf16 through f32
                v = b.fpext(v, T.scalar(F32))
                return b.fptrunc(v, dty)
            return b.fpext(v, dty) if dst.bits > src.bits else b.fptrunc(v, dty)
        if src.is_float:                                     # saturating, NaN -> 0 (cvt.rzi)
            name = "llvm.fptosi.sat" if dst.is_signed else "llvm.fptoui.sat"
            return self.call(f"{name}.{_int_name(dty)}.{_fname(v.type)}", dty, [v])
        if dst.is_float:
            return b.sitofp(v, dty) if src.is_signed else b.uitofp(v, dty)
        return self.int_resize(v, src, dty)

    def f8_to_f32(self, v, src: ScalarType):
        """Exact fp8 -> f32 with integer ops on every arch. e5m2 is the top byte of an f16. e4m3fn
        (bias 7, no infinities, 0x7F / 0xFF are NaN) placed in an f16's low exponent and mantissa bits
        is its value times 2^-8, subnormals included."""
        b = self.st.b
        i16 = ir.IntType(16)
        x = b.zext(v, i16)
        if src.name == "f8e5m2":
            return b.fpext(b.bitcast(b.shl(x, ir.Constant(i16, 8)), ir.HalfType()), T.scalar(F32))
        mag = b.and_(x, ir.Constant(i16, 0x7F))
        half = b.or_(b.shl(mag, ir.Constant(i16, 7)), b.shl(b.and_(x, ir.Constant(i16, 0x80)), ir.Constant(i16, 8)))
        f = b.fmul(b.fpext(b.bitcast(half, ir.HalfType()), T.scalar(F32)), ir.Constant(T.scalar(F32), 256.0))
        nan = b.icmp_unsigned("==", mag, ir.Constant(i16, 0x7F))
        return b.select(nan, ir.Constant(T.scalar(F32), float("nan")), f)

    def f32_to_f8(self, v, dst: ScalarType):
        """f32 -> fp8, round to nearest even, saturating to the largest finite value (PTX cvt's
        .satfinite; infinities too), NaN -> NaN, with integer ops on every arch. Normals round their
        f32 bits (add half an ulp of the 3- or 2-bit mantissa, ties to even; a carry bumps the
        exponent); subnormals are |x| / (their step), rounded to an even integer."""
        b = self.st.b
        f32, i32 = T.scalar(F32), T.I32
        fmt = F8_FORMATS[dst.name]
        man, bias, top = fmt.mantissa, fmt.bias, fmt.max
        sub_step = 2.0 ** (1 - bias - man)           # the subnormal step: 2^-9 (e4m3fn), 2^-16 (e5m2)
        fabs = self.call(f"llvm.{X.float_op_intrinsic('fabs')}.f32", f32, [v])
        fmin = f"llvm.{X.float_op_intrinsic('fmin')}.f32"
        a = self.call(fmin, f32, [fabs, ir.Constant(f32, top)])   # a NaN is patched below
        bits = b.bitcast(a, i32)
        shift = 23 - man
        odd = b.and_(b.lshr(bits, ir.Constant(i32, shift)), ir.Constant(i32, 1))
        rounded = b.add(bits, b.add(ir.Constant(i32, (1 << (shift - 1)) - 1), odd))
        normal = b.sub(b.lshr(rounded, ir.Constant(i32, shift)), ir.Constant(i32, (127 - bias) << man))
        scaled = b.fmul(a, ir.Constant(f32, 1.0 / sub_step))
        sub = b.fptoui(self.call("llvm.roundeven.f32", f32, [scaled]), i32)
        tiny = b.fcmp_ordered("<", a, ir.Constant(f32, sub_step * (1 << man)))     # below the least normal
        code = b.select(tiny, sub, normal)
        code = b.select(b.fcmp_unordered("uno", v, v), ir.Constant(i32, 0x7F), code)
        sign = b.and_(b.lshr(b.bitcast(v, i32), ir.Constant(i32, 24)), ir.Constant(i32, 0x80))
        return b.trunc(b.or_(code, sign), T.I8)

    # ------------------------------------------------------------------ math
    def visit_Math(self, e: N.Math):
        t: ScalarType = e.type
        args = [self.expr(a) for a in e.args]
        impl = X.math_lowering(e.fn)
        if impl is None:
            raise CodegenError(f"unknown math function {e.fn!r}", e.loc)
        if impl.kind == "fcmp":
            return self.float_predicate(impl.name, args[0])
        if impl.kind == "llvm":
            return self.math_llvm(impl.name, t, args)
        return self.math_call(e.fn, t, args)

    def float_predicate(self, fn: str, v):
        b = self.st.b
        if fn == "isnan":
            return b.fcmp_unordered("uno", v, v)
        inf = ir.Constant(v.type, float("inf"))
        fabs = f"llvm.{X.float_op_intrinsic('fabs')}.{_fname(v.type)}"
        return b.fcmp_ordered("==", self.call(fabs, v.type, [v]), inf)

    def math_llvm(self, name: str, t: ScalarType, args):
        ty = T.scalar(t)
        return self.call(f"llvm.{name}.{_fname(ty)}", ty, args, fastmath=self._fm())

    def math_call(self, fn: str, t: ScalarType, args):
        """libdevice call; half types go through f32 and are rounded back once."""
        b = self.st.b
        impl = X.math_lowering(fn)
        assert impl is not None, fn
        if t.name in _HALF:
            wide = [b.fpext(a, T.scalar(F32)) for a in args]
            return b.fptrunc(self.math_call(fn, F32, wide), T.scalar(t))
        name = X.libdevice_name(impl, t.bits, self.opts.fastmath)
        return self.call(name, T.scalar(t), args)

    # ------------------------------------------------------------------ warp
    def visit_Warp(self, e: N.Warp):
        b = self.st.b
        args = [self.expr(a) for a in e.args]
        mask = self.member_mask(e.width)
        if e.op in X.VOTE:
            pred = args[0]
            ret = T.I32 if e.op == "ballot" else T.I1
            fn = self.declare(X.vote_intrinsic(e.op), ret, [T.I32, T.I1])
            fn.attributes.add("convergent")
            return b.call(fn, [mask, pred])
        src_t: ScalarType = e.args[0].type
        if e.op == "sum":
            v = args[0]
            for m in X.WARP_SUM_MASKS:
                other = self.shfl("bfly", 0x1F, v, src_t, ir.Constant(T.I32, m), mask)
                v = b.fadd(v, other, flags=self._fm()) if src_t.is_float else (
                    b.or_(v, other) if src_t.kind == "bool" else b.add(v, other))
            return v
        mode, c = X.SHFL[e.op]
        lane = self.int_resize(args[1], e.args[1].type, T.I32)
        return self.shfl(mode, c, args[0], src_t, lane, mask)

    def member_mask(self, width: int):
        """The lanes taking part: the whole warp, or the executing lane's aligned group of `width`
        lanes, ((1 << width) - 1) << (laneid & ~(width - 1))."""
        if width == 32:
            return ir.Constant(T.I32, X.FULL_MASK)
        b = self.st.b
        base = b.and_(self.sreg("laneid"), ir.Constant(T.I32, ~(width - 1) & 31))
        return b.shl(ir.Constant(T.I32, (1 << width) - 1), base)

    def shfl(self, mode: str, c: int, v, t: ScalarType, lane, mask=None):
        """shfl.sync of any scalar: 32-bit directly, 64-bit as two halves, narrow types widened."""
        b = self.st.b
        mask = ir.Constant(T.I32, X.FULL_MASK) if mask is None else mask
        if t.name == "f32":
            return self._shfl32(mode, c, v, lane, True, mask)
        if t.bits == 64:
            raw = b.bitcast(v, T.I64) if t.is_float else v
            lo = self._shfl32(mode, c, b.trunc(raw, T.I32), lane, False, mask)
            hi = self._shfl32(mode, c, b.trunc(b.lshr(raw, ir.Constant(T.I64, 32)), T.I32), lane, False, mask)
            r = b.or_(b.zext(lo, T.I64), b.shl(b.zext(hi, T.I64), ir.Constant(T.I64, 32)))
            return b.bitcast(r, T.scalar(t)) if t.is_float else r
        if t.bits == 32:
            return self._shfl32(mode, c, v, lane, False, mask)
        bits = ir.IntType(max(t.bits, 1))
        raw = b.bitcast(v, bits) if t.is_float else v
        r = b.trunc(self._shfl32(mode, c, b.zext(raw, T.I32), lane, False, mask), bits)
        return b.bitcast(r, T.scalar(t)) if t.is_float else r

    def _shfl32(self, mode, c, v, lane, is_float, mask):
        ty = ir.FloatType() if is_float else T.I32
        fn = self.declare(X.shfl_intrinsic(mode, is_float), ty, [T.I32, ty, T.I32, T.I32])
        fn.attributes.add("convergent")
        return self.st.b.call(fn, [mask, v, lane, ir.Constant(T.I32, c)])

    # ------------------------------------------------------------------ calls
    def visit_Call(self, e: N.Call):
        llfn = self.function_for(e.callee)
        args = []
        for a in e.args:
            args += leaves(self.expr(a))
        if self._hidden_fault_param(e.callee):
            args.append(self.st.fault_record)
        r = self.st.b.call(llfn, args)
        if isinstance(r.type, ir.LiteralStructType):
            return TupleVal([self.st.b.extract_value(r, k) for k in range(len(r.type.elements))])
        return r

    def visit_SlotCheck(self, e: N.SlotCheck):
        slot: SlotVal = self.expr(e.slot)
        return slot.ok


def _fname(ty: ir.Type) -> str:
    return ty.intrinsic_name


def _int_name(ty: ir.IntType) -> str:
    return f"i{ty.width}"
