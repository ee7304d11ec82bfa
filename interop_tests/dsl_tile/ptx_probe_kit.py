"""Hand-built SIMT IR probes of the PTX instruction table (dsl/tile/ptx/table.py): a builder for small
kernels that feed one family (or one group of families) per-lane operands from global arrays and write
what it produced to output arrays, and the three ways a probe runs: the CPU simulator, ptxas, the GPU.

A probe records the (family, parameters) of every statement it builds (`Builder.ptx`), so the table
tests know which rows each probe covers and which parameters are representative of each row.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from dsl.contracts import build_contract
from dsl.ir import nodes as N
from dsl.ir import tile_nodes as TN
from dsl.ir.types import I32, I64, U32, ArrayType, ScalarType, TensorMapType, TupleType, Type
from dsl.sim import arith
from dsl.tile.ptx.table import instruction

Params = dict[str, Any]


def c32(v: int) -> N.Const:
    return N.Const(v, I32)


def cu(v: int) -> N.Const:
    return N.Const(v, U32)


def binop(op: str, a: N.Expr, b: N.Expr) -> N.BinOp:
    """`a op b` in a's type (both operands of one type, as the IR verifier asks)."""
    return N.BinOp(op, a, b, a.type)


class Builder:
    """Collects a kernel's parameters, statements, shared allocations and the PTX statements it uses."""

    def __init__(self, name: str, block: int) -> None:
        self.name, self.block = name, block
        self.params: list[N.Param] = []
        self.shared: list[N.SharedAlloc] = []
        self.body: list[N.Stmt] = []
        self.ptx: list[tuple[str, Params]] = []       # (family, parameters) of every statement built
        self._n = 0
        self.tid = self.let(N.Cast(N.Special("tid.x"), I32), "tid")
        self.min_blocks: int | None = None      # .minnctapersm (setmaxnreg: ptxas sizes the register pool)

    # ------------------------------------------------------------------ parameters and memory
    def array(self, name: str, dtype: ScalarType, ndim: int = 1, out: bool = False) -> N.ParamRef:
        p = N.Param(name, ArrayType(dtype, ndim, writable=out, layout="C"), len(self.params))
        self.params.append(p)
        return N.ParamRef(p)

    def tensor_map(self, array: N.ParamRef, box: tuple[int, int], swizzle: int) -> N.ParamRef:
        """A TMA tensor map of `array` (after the other parameters, as the launcher appends them)."""
        p = N.Param(f"{array.param.name}__tmap", TensorMapType(array.param.name, box, swizzle), len(self.params))
        self.params.append(p)
        return N.ParamRef(p)

    def shared_array(self, name: str, dtype: ScalarType, n: int, align: int = 16) -> N.SharedArray:
        alloc = N.SharedAlloc(name, ArrayType(dtype, 1, writable=True, space="shared", shape=(n,)), align=align)
        self.shared.append(alloc)
        return N.SharedArray(alloc)

    def aligned_dynamic(self, name: str, dtype: ScalarType, align: int = 1024) -> tuple[N.Expr, N.Expr, N.Expr]:
        """Dynamic shared memory from its first `align`-byte boundary on, as the lowering places swizzled
        operand stages (the launch adds `align` bytes of slack): (array, shared address of that boundary,
        its element index in the array)."""
        arr = N.SharedArray(N.SharedAlloc(name, ArrayType(dtype, 1, writable=True, space="shared", shape=(-1,)),
                                          align=16))
        self.shared.append(arr.alloc)
        raw = self.let(TN.SharedAddress(arr, N.Const(0, I64)), "raw")
        base = self.let(N.BinOp("and_", N.BinOp("add", raw, cu(align - 1), U32), cu(-align & 0xFFFFFFFF), U32), "base")
        skip = self.let(N.Cast(N.BinOp("rshift", N.BinOp("sub", base, raw, U32), cu(dtype.itemsize.bit_length() - 1), U32),
                               I32), "skip")
        return arr, base, skip

    def load(self, arr: N.Expr, idx: N.Expr) -> N.Load:
        return N.Load(arr, [N.Cast(idx, I64)], "none", 0, arr.type.dtype)

    def store(self, arr: N.Expr, idx: N.Expr, value: N.Expr) -> None:
        self.body.append(N.Store(arr, [N.Cast(idx, I64)], value, "unchecked", 0))

    def lane_index(self, stride: int, k: int = 0) -> N.Expr:
        """tid * stride + k: this lane's k-th element of a per-lane record of `stride` elements."""
        return binop("add", binop("mul", self.tid, c32(stride)), c32(k))

    # ------------------------------------------------------------------ statements
    def let(self, value: N.Expr, hint: str = "t") -> N.ReadVar:
        self._n += 1
        v = N.Var(f"{hint}{self._n}", value.type)
        self.body.append(N.Assign(v, value))
        return N.ReadVar(v)

    def instr(self, family: str, args: list[N.Expr], **params: Any) -> TN.InlinePtx:
        self.ptx.append((family, dict(params)))
        return instruction(family, args, **params)

    def asm(self, family: str, args: list[N.Expr] | None = None, **params: Any) -> None:
        """A statement without results (stores, copies, barriers, fences)."""
        self.body.append(N.ExprStmt(self.instr(family, args or [], **params)))

    def value(self, family: str, args: list[N.Expr], **params: Any) -> list[N.Expr]:
        """A statement's results, one expression each (a tuple result is taken apart)."""
        v = self.let(self.instr(family, args, **params), "r")
        t = v.type
        if isinstance(t, TupleType):
            return [N.TupleGet(v, i, e) for i, e in enumerate(t.elems)]
        return [v]

    def when(self, cond: N.Expr, fill: Callable[[], None]) -> None:
        """`if cond: fill()` (the statements `fill` adds go into the branch)."""
        outer, self.body = self.body, []
        fill()
        then, self.body = self.body, outer
        self.body.append(N.If(cond, then, []))

    def sync(self) -> None:
        self.body.append(N.SyncThreads())

    def function(self) -> N.Function:
        return N.Function(self.name, list(self.params), N.VOID, self.body, True, shared=list(self.shared),
                          exact_block=(self.block, 1, 1), boundscheck=False, min_blocks=self.min_blocks)


@dataclass
class Probe:
    """One probe kernel: `build(b)` fills a Builder; `inputs(rng)` gives the arguments by parameter name
    (outputs included, poisoned) and, under names starting with "_", what only the reference needs (the
    logical matrices of an MMA); `reference(inputs)` the expected outputs by name, computed in NumPy
    from the PTX ISA's description. `exact`: outputs compared bit for bit; else (sums of products) the
    reference also gives each output's error bound under name + "~"."""
    name: str
    block: int
    build: Callable[[Builder], None]
    inputs: Callable[[np.random.Generator], dict[str, np.ndarray]]
    reference: Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]
    grid: int = 1
    shared_mem: int = 0
    exact: bool = True
    _built: Any = field(default=None, repr=False)
    _fn: Any = field(default=None, repr=False)

    def builder(self) -> Builder:
        """The probe's kernel, built once (the IR, the statements it used)."""
        if self._built is None:
            b = Builder("probe_" + re.sub(r"\W", "_", self.name), self.block)
            self.build(b)
            self._built = b
        return self._built

    @property
    def fn(self) -> N.Function:
        if self._fn is None:
            self._fn = self.builder().function()
        return self._fn

    @property
    def families(self) -> set[str]:
        return {f for f, _ in self.builder().ptx}

    @property
    def outputs(self) -> list[str]:
        return [p.name for p in self.builder().params if isinstance(p.type, ArrayType) and p.type.writable]

    def arguments(self, given: dict[str, Any]) -> list[np.ndarray]:
        """The kernel's arguments in parameter order (tensor maps are built from their arrays)."""
        names = self.names()
        public = {k for k in given if not k.startswith("_")}
        assert public == set(names), f"{self.name}: inputs {sorted(public)} for parameters {names}"
        return [given[n] for n in names]

    def names(self) -> list[str]:
        return [p.name for p in self.builder().params if not isinstance(p.type, TensorMapType)]


# ------------------------------------------------------------------------------ running a probe
def contract_json(fn: N.Function, shared_mem: int = 0) -> str:
    """A probe's contract: the one IR-level builder (tensor maps included), the exact block, the
    dynamic shared memory."""
    return json.dumps(build_contract(fn, block=fn.exact_block, dynamic_smem=shared_mem or None))


def simulate(probe: Probe, args: list[np.ndarray]) -> dict[str, np.ndarray]:
    """Run the probe in the CPU simulator (validated like a GPU launch); its outputs by name."""
    from dsl.sim.launch import simulate as sim_run
    outs = set(probe.outputs)
    args = [a.copy() if n in outs else a for n, a in zip(probe.names(), args)]     # inputs as given (aligned)
    sim_run(probe.fn, args, grid=probe.grid, block=probe.block, shared_mem=probe.shared_mem)
    got = dict(zip(probe.names(), args))
    return {n: got[n] for n in probe.outputs}


def compile_probe(probe: Probe, arch: str):
    """The probe's CompiledKernel for `arch` (e.g. 'sm_80', 'sm_90a')."""
    from dsl.compiler import compile_ir
    from dsl.options import KernelOptions
    fn = probe.fn
    return compile_ir(fn, KernelOptions(block=fn.exact_block, boundscheck=False), arch,
                      contract_json=contract_json(fn, probe.shared_mem))


def run_on_gpu(probe: Probe, args: list[np.ndarray], arch: str) -> dict[str, np.ndarray]:
    """Compile for `arch`, launch through the bridge with its contract (tensor maps encoded by the
    launcher from the arrays), copy the outputs back."""
    import bridge
    ck = compile_probe(probe, arch)
    kernel = bridge.kernel_from_ptx(ck.ptx, ck.name, ck.contract_json)
    dev = [bridge.from_host(np.ascontiguousarray(a)) for a in args]
    kernel(*dev, grid=probe.grid, block=probe.block, shared_mem=probe.shared_mem or None)
    bridge.synchronize()
    got = dict(zip(probe.names(), dev))
    return {n: got[n].to_host() for n in probe.outputs}


def aligned(shape, dtype, align: int = 1024) -> np.ndarray:
    """A zeroed C-contiguous host array whose data starts on an `align`-byte boundary (TMA: 16)."""
    dt = np.dtype(dtype)
    n = int(np.prod(shape)) * dt.itemsize
    raw = np.zeros(n + align, np.uint8)
    off = (-raw.ctypes.data) % align
    return raw[off:off + n].view(dt).reshape(shape)


def np_dtype(t: ScalarType) -> np.dtype:
    return np.dtype(arith.np_dtype(t))


# ------------------------------------------------------------------------------ constraints
def split_constraints(cons: str) -> tuple[list[str], list[str]]:
    """(output letters, input constraints) of an LLVM constraint string: '=f,r,0' -> (['f'], ['r', '0'])."""
    items = [c for c in cons.split(",") if c]
    outs = [c[1:] for c in items if c.startswith("=")]
    ins = [c for c in items if not c.startswith("=")]
    assert items == [f"={o}" for o in outs] + ins, f"outputs must come first: {cons!r}"
    return outs, ins


def result_types(t: Type) -> list[Type]:
    """The scalar types a statement of result type `t` returns, in order (none for VOID)."""
    if isinstance(t, TupleType):
        return list(t.elems)
    return [] if not isinstance(t, ScalarType) else [t]


def synth_kernel(family: str, params: Params, letter_types: dict[str, ScalarType]) -> N.Function:
    """A tiny kernel running one statement of `family`: each input read from an array of the type of
    its constraint letter (a tied input: its output's type), each result stored. For ptxas only (the
    addresses it passes are arbitrary)."""
    from dsl.tile.ptx.table import FAMILIES
    _, cons, result = FAMILIES[family].render(params)
    outs, ins = split_constraints(cons)
    b = Builder("one_" + re.sub(r"\W", "_", family), 128)
    rtypes = result_types(result)
    args = []
    for k, c in enumerate(ins):
        t = rtypes[int(c)] if c.isdigit() else letter_types[c]
        args.append(b.load(b.array(f"in{k}", t), b.tid))
    if not rtypes:
        b.asm(family, args, **params)
    else:
        for k, v in enumerate(b.value(family, args, **params)):
            b.store(b.array(f"out{k}", v.type, out=True), b.tid, v)
    return b.function()


def mismatches(probe: Probe, name: str, got: np.ndarray, want: np.ndarray, bound: np.ndarray | None = None,
               what: str = "the reference") -> str:
    """'' when `got` is `want` (bit for bit, or within `bound` when the probe is not exact), else a
    message naming the probe, the output, how many elements differ and the first few."""
    assert got.shape == want.shape, f"{probe.name}: '{name}' has shape {got.shape}, expected {want.shape}"
    if probe.exact:
        assert got.dtype == want.dtype, f"{probe.name}: '{name}' is {got.dtype}, expected {want.dtype}"
        def raw(x):
            return np.ascontiguousarray(x).reshape(x.size, 1).view(np.uint8)
        bad = np.flatnonzero((raw(got) != raw(want)).any(axis=1))
    else:
        bad = np.flatnonzero(~(np.abs(got.astype(np.float64) - want) <= bound))
    if not len(bad):
        return ""
    show = ", ".join(f"[{i}] {got.reshape(-1)[i]!r} vs {want.reshape(-1)[i]!r}" for i in bad[:5])
    return f"{probe.name}: '{name}' differs from {what} at {len(bad)} of {got.size} elements: {show}"
