"""Fuzz target `differential`: random elementwise expression kernels, simulator vs a NumPy float64 reference.

Each input is an expression tree over 1-3 input arrays (f32 / f64 / i32): + - * / min max abs, unary
minus, comparisons feeding a conditional expression, casts between f32 / f64 / i32, and the math
functions the DSL offers (sqrt rsqrt exp exp2 log log2 log1p sin cos tanh erf floor ceil trunc fma),
with weak literals. Every subexpression is cast to one type, so the DSL's promotion rules are not
what is tested. The kernel is compiled to PTX (and assembled by ptxas for sm_80 when present) and run
on the CPU simulator over random non-zero inputs of a size that is not a multiple of the block.

The reference evaluates the same tree in float64 (integers exactly, wrapping like int32) and carries
a bound on the absolute error of the computed value at every node (the operands' errors propagated,
plus one rounding of the node's type, plus a few ulps for transcendentals). Elements whose result
depends on a rounding decision the bound cannot settle (a comparison within the error, a float->int
cast near an integer, a possible overflow, a possible zero divisor) are not compared; every other
element must agree within the bound, NaN for NaN. A mismatch is an Oracle finding naming the first
differing elements.

`differential_gpu` (GPU machine only) runs the same kernels on the device instead of the simulator
and checks them against the same reference.
"""
from __future__ import annotations

import math

import numpy as np

from interop_tests.fuzz.targets import Oracle

TIMEOUT = 30.0
INPUTS = 40          # a suite run's inputs (targets.py; the GPU test runs 10): each compiles a kernel
FLOATS = ("f32", "f64")
TYPES = ("f32", "f64", "i32")
UNIT = {"f32": 2.0**-24, "f64": 2.0**-53}
TINY = {"f32": 2.0**-126, "f64": 2.0**-1022}
LIMIT = {"f32": 1e37, "f64": 1e306}        # beyond this an overflow is possible: not compared
NP = {"f32": np.float32, "f64": np.float64, "i32": np.int32}
FUNCS = ("sqrt", "rsqrt", "exp", "exp2", "log", "log2", "log1p", "sin", "cos", "tanh", "erf", "floor", "ceil",
         "trunc")
ULPS = 4.0                                  # allowance of a transcendental, in ulps of its result
CMPS = ("<", "<=", ">", ">=", "==", "!=")


def variant(name: str) -> str:
    return "gpu" if name == "differential_gpu" else "sim"


# ------------------------------------------------------------------------------- generation
def _literal(rng, t: str) -> tuple:
    if t == "i32":
        return ("lit", rng.choice([1, 2, 3, 7, -5, 100, 1 << 20]), t)
    return ("lit", rng.choice([0.5, 2.0, 3.0, -1.5, 0.1, 1e-3, 1000.0, 0.3333333333333333]), t)


def _node(rng, depth: int, t: str, inputs: list[str]) -> tuple:
    """A node whose value has type `t`."""
    if depth <= 0 or rng.random() < 0.2:
        k = rng.randrange(len(inputs))
        leaf = ("in", k)
        return leaf if inputs[k] == t else ("cast", t, leaf)
    r = rng.random()
    if r < 0.12:                          # a cast from another type
        return ("cast", t, _node(rng, depth - 1, rng.choice([x for x in TYPES if x != t]), inputs))
    if r < 0.5:
        ops = ["+", "-", "*", "min", "max"] + (["/"] if t in FLOATS else [])
        op = rng.choice(ops)
        a = _node(rng, depth - 1, t, inputs)
        b = _literal(rng, t) if rng.random() < 0.25 and op in "+-*/" else _node(rng, depth - 1, t, inputs)
        return ("bin", op, a, b) if rng.random() < 0.8 or b[0] == "lit" else ("bin", op, b, a)
    if r < 0.62:
        return ("un", rng.choice(["abs", "neg"]), _node(rng, depth - 1, t, inputs))
    if r < 0.82 and t in FLOATS:
        if rng.random() < 0.1:
            return ("fma", _node(rng, depth - 1, t, inputs), _node(rng, depth - 1, t, inputs),
                    _node(rng, depth - 1, t, inputs))
        return ("fn", rng.choice(FUNCS), _node(rng, depth - 1, t, inputs))
    ct = rng.choice(TYPES)
    left = _node(rng, depth - 1, ct, inputs)
    right = _literal(rng, ct) if rng.random() < 0.3 else _node(rng, depth - 1, ct, inputs)
    return ("sel", rng.choice(CMPS), left, right, _node(rng, depth - 1, t, inputs), _node(rng, depth - 1, t, inputs))


def generate(rng, variant: str = "sim") -> dict:
    inputs = [rng.choice(TYPES) for _ in range(rng.randint(1, 3))]
    out = rng.choice(TYPES)
    block = rng.choice([32, 64, 128, 256])
    n = rng.randint(1, 2500)
    if n % block == 0:
        n += rng.randint(1, block - 1)
    return {"inputs": inputs, "out": out, "expr": _node(rng, rng.randint(1, 4), out, inputs), "block": block,
            "n": n, "data_seed": rng.randrange(1 << 30), "requires": rng.random() < 0.5,
            "grid": rng.choice(["derived", "explicit"]), "ptxas": rng.random() < 0.5}


# ------------------------------------------------------------------------------- the kernel
def _src(e: tuple) -> str:
    kind = e[0]
    if kind == "in":
        return f"x{e[1]}[i]"
    if kind == "lit":
        return repr(e[1])
    if kind == "cast":
        return f"{e[1]}({_src(e[2])})"
    if kind == "bin":
        op, a, b = e[1], _src(e[2]), _src(e[3])
        return f"{op}({a}, {b})" if op in ("min", "max") else f"({a} {op} {b})"
    if kind == "un":
        return f"abs({_src(e[2])})" if e[1] == "abs" else f"(-{_src(e[2])})"
    if kind == "fn":
        return f"simt.{e[1]}({_src(e[2])})"
    if kind == "fma":
        return f"simt.fma({_src(e[1])}, {_src(e[2])}, {_src(e[3])})"
    return f"({_src(e[4])} if {_src(e[2])} {e[1]} {_src(e[3])} else {_src(e[5])})"


def kernel_source(spec: dict) -> str:
    params = ", ".join(f"x{k}: simt.Array[{t}]" for k, t in enumerate(spec["inputs"]))
    req = ""
    if spec["requires"]:
        req = ", requires=[" + ", ".join(f"'len(x{k}) == len(out)'" for k in range(len(spec["inputs"]))) + "]"
    return ("from dsl import simt, f32, f64, i32\n\n\n"
            f"@simt.kernel(block=({spec['block']}, 1, 1){req})\n"
            f"def k({params}, out: simt.DisjointSlice[{spec['out']}]):\n"
            "    i = simt.thread.index_1d()\n"
            f"    out[i] = {_src(spec['expr'])}\n")


def inputs_for(spec: dict) -> list[np.ndarray]:
    rng = np.random.default_rng(spec["data_seed"])
    arrays = []
    for t in spec["inputs"]:
        n = spec["n"]
        sign = rng.choice([-1.0, 1.0], n)
        if t == "i32":
            big = rng.random(n) < 0.1
            mag = np.where(big, rng.integers(1, 2**30, n), rng.integers(1, 1000, n))
            arrays.append((sign * mag).astype(np.int32))
        else:
            arrays.append((sign * 10.0 ** rng.uniform(-2, 2, n)).astype(NP[t]))
    return arrays


# ------------------------------------------------------------------------------- the reference
class _V:
    """Reference value of a node: ideal value, error bound, 'not comparable' mask, type."""

    def __init__(self, val: np.ndarray, err: np.ndarray, amb: np.ndarray, t: str) -> None:
        self.val, self.err, self.amb, self.t = val, err, amb, t


def _round(v: _V) -> _V:
    """One rounding of the node's type (plus the reference's own float64 rounding), and the overflow guard."""
    if v.t == "i32":
        return v
    mag = np.abs(v.val) + v.err
    err = v.err + (UNIT[v.t] + UNIT["f64"]) * mag + TINY[v.t]
    amb = v.amb | ~(mag < LIMIT[v.t]) & ~np.isnan(v.val)
    return _V(v.val, err, amb, v.t)


def _wrap32(x: np.ndarray) -> np.ndarray:
    return ((x.astype(np.int64) + 2**31) % 2**32 - 2**31).astype(np.int64)


def _cast(v: _V, t: str) -> _V:
    if t == v.t:
        return v
    if t == "i32":
        if v.t == "i32":
            return v
        lo, hi = np.trunc(v.val - v.err), np.trunc(v.val + v.err)
        amb = v.amb | (lo != hi) | (np.isnan(v.val) & (v.err > 0))
        with np.errstate(invalid="ignore"):
            val = np.where(np.isnan(v.val), 0, np.clip(np.trunc(np.nan_to_num(v.val)), -2**31, 2**31 - 1))
        return _V(val.astype(np.int64), np.zeros_like(v.err), amb, "i32")
    val = v.val.astype(np.float64)
    return _round(_V(val, v.err.astype(np.float64), v.amb, t))


def _fn(name: str, a: _V) -> _V:
    x, e, t = a.val, a.err, a.t
    tol = ULPS * UNIT[t]
    amb = a.amb.copy()
    if name in ("floor", "ceil", "trunc"):
        f = getattr(np, name)
        amb |= f(x - e) != f(x + e)
        return _V(f(x), np.zeros_like(x), amb, t)
    if name in ("sqrt", "rsqrt", "log", "log2", "log1p"):
        shift = -1.0 if name == "log1p" else 0.0
        low = x - e - shift
        amb |= (low <= 0) & (x + e - shift >= 0)         # the sign of the operand is not settled
        safe = np.where(low > 0, low, np.nan)
        if name == "sqrt":
            val, err = np.sqrt(x), e / (np.sqrt(safe) + np.sqrt(np.abs(x)))
        elif name == "rsqrt":
            val, err = 1 / np.sqrt(x), np.abs(1 / np.sqrt(safe) - 1 / np.sqrt(np.abs(x)))
        else:
            f = {"log": np.log, "log2": np.log2, "log1p": np.log1p}[name]
            val, err = f(x), np.abs(f(safe + shift) - f(x))
        err = np.where(np.isnan(err), 0, err) + tol * np.abs(val) + tol
        return _V(val, err, amb, t)
    if name in ("exp", "exp2"):
        f = np.exp if name == "exp" else np.exp2
        val = f(x)
        return _V(val, val * np.expm1(e * (1 if name == "exp" else math.log(2))) + tol * val, amb, t)
    if name in ("sin", "cos", "tanh"):
        return _V(getattr(np, name)(x), np.minimum(e, 2.0) + tol, amb, t)
    erf = np.vectorize(math.erf, otypes=[np.float64])
    return _V(erf(x) if x.size else x.copy(), np.minimum(e * 1.1284, 2.0) + tol, amb, t)


def _compare(op: str, a: _V, b: _V) -> tuple[np.ndarray, np.ndarray]:
    f = {"<": np.less, "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal, "==": np.equal,
         "!=": np.not_equal}[op]
    cond = f(a.val, b.val)
    close = np.abs(a.val - b.val) <= a.err + b.err
    amb = a.amb | b.amb | (close & ((a.err + b.err) > 0))
    return cond, amb


def evaluate(e: tuple, xs: list[np.ndarray], types: list[str]) -> _V:
    kind = e[0]
    if kind == "in":
        x = xs[e[1]]
        val = x.astype(np.int64) if types[e[1]] == "i32" else x.astype(np.float64)
        return _V(val, np.zeros(x.shape), np.zeros(x.shape, bool), types[e[1]])
    n = xs[0].shape
    if kind == "lit":
        t = e[2]
        val = np.full(n, int(e[1]), np.int64) if t == "i32" else np.full(n, float(NP[t](e[1])))
        return _V(val, np.zeros(n), np.zeros(n, bool), t)
    if kind == "cast":
        return _cast(evaluate(e[2], xs, types), e[1])
    if kind == "un":
        a = evaluate(e[2], xs, types)
        val = np.abs(a.val) if e[1] == "abs" else -a.val
        return _V(_wrap32(val) if a.t == "i32" else val, a.err, a.amb, a.t)
    if kind == "fn":
        return _round(_fn(e[1], evaluate(e[2], xs, types)))
    if kind == "fma":
        a, b, c = (evaluate(x, xs, types) for x in e[1:4])
        val = a.val * b.val + c.val
        err = np.abs(a.val) * b.err + np.abs(b.val) * a.err + a.err * b.err + c.err
        err += UNIT["f64"] * np.abs(a.val * b.val)      # the reference rounds the product, fma does not
        return _round(_V(val, err, a.amb | b.amb | c.amb, a.t))
    if kind == "sel":
        cond, amb = _compare(e[1], evaluate(e[2], xs, types), evaluate(e[3], xs, types))
        a, b = evaluate(e[4], xs, types), evaluate(e[5], xs, types)
        return _V(np.where(cond, a.val, b.val), np.where(cond, a.err, b.err),
                  amb | np.where(cond, a.amb, b.amb), a.t)
    return _binary(e[1], evaluate(e[2], xs, types), evaluate(e[3], xs, types))


def _binary(op: str, a: _V, b: _V) -> _V:
    t, amb = a.t, a.amb | b.amb
    if op in ("min", "max"):
        f = np.fmin if op == "min" else np.fmax
        err = np.where(np.isnan(a.val), b.err, np.where(np.isnan(b.val), a.err, np.maximum(a.err, b.err)))
        return _V(f(a.val, b.val), err, amb, t)
    if t == "i32":
        val = {"+": a.val + b.val, "-": a.val - b.val, "*": a.val * b.val}[op]
        return _V(_wrap32(val), a.err, amb, t)
    if op in "+-":
        return _round(_V(a.val + b.val if op == "+" else a.val - b.val, a.err + b.err, amb, t))
    if op == "*":
        err = np.abs(a.val) * b.err + np.abs(b.val) * a.err + a.err * b.err
        return _round(_V(a.val * b.val, err, amb, t))
    denom = np.abs(b.val)
    amb = amb | (denom <= b.err) | (b.val == 0)
    safe = np.where(denom > b.err, denom, np.nan)
    val = a.val / b.val
    err = (np.abs(a.val) * b.err + denom * a.err) / (safe * (safe - b.err))
    return _round(_V(val, np.where(np.isnan(err), 0, err), amb, t))


def compare(spec: dict, got: np.ndarray, ref: _V) -> None:
    """Raise an Oracle naming the first elements outside the bound."""
    comparable = ~ref.amb
    if spec["out"] == "i32":
        bad = comparable & (got.astype(np.int64) != ref.val)
    else:
        g = got.astype(np.float64)
        nan_ref = np.isnan(ref.val)
        with np.errstate(invalid="ignore"):
            off = ~(np.abs(g - ref.val) <= 2 * ref.err + 4 * UNIT[spec["out"]] * np.abs(ref.val))
        bad = comparable & np.where(nan_ref, ~np.isnan(g), off)
    if bad.any():
        idx = np.flatnonzero(bad)[:5]
        xs = inputs_for(spec)
        rows = "\n".join(f"  [{k}] inputs={[x[k].item() for x in xs]} simulator={got[k].item()!r} "
                         f"reference={ref.val[k].item()!r} ± {ref.err[k]:.3g}" for k in idx)
        raise Oracle(f"simulator disagrees with the float64 reference on {int(bad.sum())} of "
                     f"{int(comparable.sum())} comparable elements (of {got.size})\n{rows}\n"
                     f"kernel:\n{kernel_source(spec)}")


# ------------------------------------------------------------------------------- execution
def warm() -> None:
    from interop_tests.fuzz import t_dsl_source
    t_dsl_source.warm()


def _on_gpu(k, xs: list[np.ndarray], out: np.ndarray, grid: tuple | None) -> np.ndarray:
    import bridge
    dev = [bridge.from_host(x) for x in xs]
    dout = bridge.from_host(out)
    k(*dev, dout, grid=grid)
    bridge.synchronize()
    return dout.to_host()


def execute(spec: dict, variant: str = "sim") -> str:
    from interop_tests.fuzz.t_dsl_source import _module_from, assemble_or_report
    k = _module_from(kernel_source(spec)).k
    xs = inputs_for(spec)
    out = np.full(spec["n"], -7, NP[spec["out"]])
    grid = None if spec["grid"] == "derived" else (-(-spec["n"] // spec["block"]),)
    if variant == "gpu":
        out = _on_gpu(k, xs, out, grid)
    else:
        ptx = k.ptx(*xs, out, arch="sm_80")
        if spec["ptxas"]:
            assemble_or_report(ptx)
        k.simulate(*xs, out, grid=grid)
    with np.errstate(all="ignore"):
        ref = evaluate(spec["expr"], xs, spec["inputs"])
        ref = _cast(ref, spec["out"]) if ref.t != spec["out"] else ref
    compare(spec, out, ref)
    return f"{int((~ref.amb).sum())}/{spec['n']} elements compared"


def allowed(exc: BaseException, spec: dict, variant: str = "sim") -> bool:
    return False        # every generated kernel is well typed and every launch is valid

