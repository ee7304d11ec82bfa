"""Fuzz target `dsl_source`: kernels of the zoo (interop_tests/kernels_zoo.py) with mutated source.

The parent parses the zoo's source, picks a kernel and mutates its AST: operators, comparisons,
constants (huge ints, inf, wrong types), names, attributes (intrinsic names, .x/.y/.z), annotations,
decorator options, casts, subscripts, statements dropped / duplicated / swapped / inserted. The
worker writes the mutated module to a file, executes it, and calls `.ptx(*numpy_stand_ins,
arch="sm_80")`; every third PTX that comes back is assembled with ptxas (a PTX ptxas refuses is a
finding: the front end should have said no). Allowed: PTX, DslCompileError, the bridge's
launch-contract errors (for signature mismatches); never a crash, an LLVM abort or an internal error.
"""
from __future__ import annotations

import ast
import atexit
import copy
import hashlib
import os
import shutil
import tempfile
import types
from pathlib import Path
from typing import Any

TIMEOUT = 30.0
INPUTS = 60          # a suite run's inputs (targets.py): each compiles a kernel
ZOO_FILE = Path(__file__).resolve().parents[1] / "kernels_zoo.py"
HEADER = """import math
import dsl
from dsl import simt, f16, bf16, f32, f64, i8, i16, i32, i64, u8, u16, u32, u64, boolean
"""


# ------------------------------------------------------------------------------- the zoo, parsed
class _Zoo:
    def __init__(self) -> None:
        tree = ast.parse(ZOO_FILE.read_text())
        self.prelude: list[str] = []          # constants, TypeVars, device functions
        self.kernels: dict[str, ast.FunctionDef] = {}
        self.cases: dict[str, str] = {}       # zoo case name -> kernel function name
        for node in tree.body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                v = node.value
                if isinstance(v, ast.Constant) or (isinstance(v, ast.Call) and "TypeVar" in ast.unparse(v.func)):
                    self.prelude.append(ast.unparse(node))
            elif isinstance(node, ast.FunctionDef) and node.decorator_list:
                deco = ast.unparse(node.decorator_list[0])
                if deco.startswith("simt.device"):
                    self.prelude.append(ast.unparse(node))
                elif deco.startswith("simt.kernel"):
                    self.kernels[node.name] = node
            elif isinstance(node, ast.AnnAssign) and getattr(node.target, "id", "") == "ZOO":
                for call in getattr(node.value, "elts", []):
                    if isinstance(call, ast.Call) and len(call.args) >= 2 and isinstance(call.args[1], ast.Name):
                        self.cases[call.args[0].value] = call.args[1].id


_ZOO: _Zoo | None = None


def zoo() -> _Zoo:
    global _ZOO
    if _ZOO is None:
        _ZOO = _Zoo()
    return _ZOO


# ------------------------------------------------------------------------------- mutations
BINOPS = [ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow, ast.LShift, ast.RShift, ast.BitOr,
          ast.BitXor, ast.BitAnd, ast.MatMult]
CMPOPS = [ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.Is, ast.IsNot, ast.In]
CONSTANTS: list[Any] = [0, 1, -1, 2, 3, 31, 32, 33, 1023, 1024, 1025, 65536, 2**31 - 1, 2**31, 2**32, 2**63 - 1, 2**63,
                        2**64, 10**30, -2**63, -2**63 - 1, 0.0, -0.0, 0.5, 1e308, 1e309, 1e-45, True, False, None, "x"]
NAMES = ["i", "j", "a", "b", "out", "x", "simt", "f32", "i32", "i64", "u8", "f16", "math", "len", "range", "min",
         "abs", "print", "undefined_name", "T", "TILE", "dsl", "None", "int", "float", "smoothstep"]
ATTRS = ["index_1d", "index_2d", "index_3d", "chunk_1d", "x", "y", "z", "w", "shape", "size", "ndim", "strides",
         "add", "sub", "cas", "exch", "sum", "ballot", "shfl_down", "exp", "sqrt", "array", "dynamic", "get_mut",
         "set", "tile_shape", "unsafe", "sync_threads", "threadIdx", "blockIdx", "warp", "atomic", "shared",
         "thread", "Array", "DisjointSlice", "dtype", "__class__"]
CASTS = ["f32", "i32", "i64", "u8", "u64", "f16", "bf16", "f64", "boolean", "i8"]
ANNOTATIONS = ["simt.Array[f32]", "simt.Array[i32, 2]", "simt.Array[f64, 3]", "simt.DisjointSlice[f32]",
               "simt.DisjointSlice[i32, 2]", "simt.DisjointSlice[f16]", "f32", "i64", "u8", "boolean", "T",
               "simt.Array[T]", "simt.Array[f32, 4]", "simt.Array[f32, 0]", "int", "float", "simt.Array",
               "simt.DisjointSlice[f32, 2, 3]", "simt.Array['f32']"]
STATEMENTS = ["return", "pass", "break", "continue", "simt.sync_threads()", "j = 9223372036854775808\nj += 1",
              "q = 1 // 0", "z = f32(1e39)", "with simt.unsafe():\n    pass", "while True:\n    pass",
              "for k in range(0, 10, 0):\n    pass", "for k in range(2 ** 63):\n    pass",
              "w = simt.warp.sum(1.0)", "u = i32(2 ** 40)", "v = -(-9223372036854775807 - 1)",
              "with simt.unsafe():\n    s = simt.shared.array((1 << 20,), f32)\n    s[0] = 1.0"]
DECORATOR_VALUES = ["(0, 1, 1)", "(-1, 1, 1)", "(2 ** 64, 1, 1)", "(128, -0.0, 1)", "(1025, 1, 1)", "(64, 64, 1)",
                    "(64, 1, 1, 1)", "64.0", "True", "()", "(32, 32, 2)", "'x'", "None", "(1, 1, 65)"]


def _nodes(fn: ast.FunctionDef, kind: type | tuple) -> list[ast.AST]:
    """Nodes of the body and the parameter annotations (not the decorator: r == 12 mutates that)."""
    roots: list[ast.AST] = [*fn.body, *(a.annotation for a in fn.args.args if a.annotation is not None)]
    return [n for root in roots for n in ast.walk(root) if isinstance(n, kind)]


def _bodies(tree: ast.AST) -> list[list[ast.stmt]]:
    out = []
    for n in ast.walk(tree):
        for field in ("body", "orelse"):
            b = getattr(n, field, None)
            if isinstance(b, list) and b and isinstance(b[0], ast.stmt) and not isinstance(n, ast.Module):
                out.append(b)
    return out


def _mutate(rng, fn: ast.FunctionDef) -> str:
    """Apply one mutation in place; returns its name (for the stats, not the repro)."""
    r = rng.randrange(16)
    if r == 0 and (ops := _nodes(fn, (ast.BinOp, ast.AugAssign))):
        rng.choice(ops).op = rng.choice(BINOPS)()
        return "binop"
    if r == 1 and (cmps := _nodes(fn, ast.Compare)):
        c = rng.choice(cmps)
        c.ops[rng.randrange(len(c.ops))] = rng.choice(CMPOPS)()
        return "compare"
    if r == 2 and (consts := _nodes(fn, ast.Constant)):
        rng.choice(consts).value = rng.choice(CONSTANTS)
        return "constant"
    if r == 3 and (names := [n for n in _nodes(fn, ast.Name) if n not in fn.args.args]):
        pool = sorted({n.id for n in names}) + NAMES
        rng.choice(names).id = rng.choice(pool)
        return "name"
    if r == 4 and (attrs := _nodes(fn, ast.Attribute)):
        rng.choice(attrs).attr = rng.choice(ATTRS)
        return "attribute"
    if r in (5, 6) and (bodies := _bodies(fn)):
        body = rng.choice(bodies)
        k = rng.randrange(len(body))
        if r == 5:
            del body[k]
            if not body:
                body.append(ast.Pass())
            return "drop"
        body.insert(k, copy.deepcopy(body[k]))
        return "duplicate"
    if r == 7 and (bodies := [b for b in _bodies(fn) if len(b) > 1]):
        body = rng.choice(bodies)
        k = rng.randrange(len(body) - 1)
        body[k], body[k + 1] = body[k + 1], body[k]
        return "swap"
    if r == 8 and (bodies := _bodies(fn)):
        body = rng.choice(bodies)
        at = rng.randrange(len(body) + 1)
        body[at:at] = ast.parse(rng.choice(STATEMENTS)).body
        return "insert"
    if r == 9 and (exprs := [n for n in _nodes(fn, (ast.BinOp, ast.Subscript, ast.Name, ast.Constant))
                             if not isinstance(getattr(n, "ctx", None), ast.Store)]):
        target = rng.choice(exprs)
        wrapped = ast.Call(func=ast.Name(id=rng.choice(CASTS), ctx=ast.Load()), args=[copy.deepcopy(target)],
                           keywords=[])
        _replace(fn, target, wrapped)
        return "cast"
    if r == 10 and (subs := _nodes(fn, ast.Subscript)):
        s = rng.choice(subs)
        text = rng.choice(["i + 1", "-1", "0", "i, i", "i, i, i", "1:", "2 ** 63", "j", "0.5", "None", "ij", "(i,)"])
        s.slice = ast.parse(f"_[{text}]", mode="eval").body.slice
        return "subscript"
    if r == 11 and fn.args.args:
        a = rng.choice(fn.args.args)
        a.annotation = ast.parse(rng.choice(ANNOTATIONS), mode="eval").body
        return "annotation"
    if r == 12 and fn.decorator_list and isinstance(fn.decorator_list[0], ast.Call):
        call = fn.decorator_list[0]
        key = rng.choice(["block", "launch_bounds", "domain", "shared_mem", "min_cc", "boundscheck", "fastmath"])
        value = ast.parse(rng.choice(DECORATOR_VALUES), mode="eval").body
        call.keywords = [k for k in call.keywords if k.arg != key] + [ast.keyword(arg=key, value=value)]
        return "decorator"
    if r == 13 and (exprs := [n for n in _nodes(fn, (ast.BinOp, ast.Name, ast.Call))
                              if not isinstance(getattr(n, "ctx", None), ast.Store)]):
        target = rng.choice(exprs)
        _replace(fn, target, ast.UnaryOp(op=rng.choice([ast.USub, ast.Not, ast.Invert, ast.UAdd])(),
                                         operand=copy.deepcopy(target)))
        return "unary"
    if r == 14 and (ifs := _nodes(fn, (ast.If, ast.While, ast.IfExp))):
        n = rng.choice(ifs)
        n.test = ast.parse(rng.choice(["True", "False", "0", "1.5", "not " + ast.unparse(n.test), "i", "None"]),
                           mode="eval").body
        return "condition"
    if r == 15 and (calls := [c for c in _nodes(fn, ast.Call) if getattr(c.func, "id", "") == "range"]):
        c = rng.choice(calls)
        c.args = [ast.parse(x, mode="eval").body for x in rng.choice(
            [["0", "10", "0"], ["2 ** 63"], ["-1", "5"], ["1.5"], ["0", "8", "-1"], ["len(a)", "0", "-1"], []])]
        return "range"
    return "none"


def _replace(tree: ast.AST, old: ast.AST, new: ast.AST) -> None:
    for parent in ast.walk(tree):
        for field, value in ast.iter_fields(parent):
            if value is old:
                setattr(parent, field, new)
                return
            if isinstance(value, list):
                for k, item in enumerate(value):
                    if item is old:
                        value[k] = new
                        return


def generate(rng) -> dict:
    z = zoo()
    case = rng.choice(sorted(z.cases))
    fn = copy.deepcopy(z.kernels[z.cases[case]])
    done = [_mutate(rng, fn) for _ in range(rng.choice([1, 1, 2, 2, 3, 4]))]
    ast.fix_missing_locations(fn)
    try:
        kernel_src = ast.unparse(fn)
    except Exception as exc:   # noqa: BLE001 - an AST unparse cannot print: keep the kernel unmutated
        kernel_src, done = ast.unparse(z.kernels[z.cases[case]]), [f"unparse failed: {exc}"]
    return {"case": case, "kernel": fn.name, "mutations": done, "standin_seed": rng.randrange(1 << 30),
            "ptxas": rng.random() < 0.34,
            "source": HEADER + "\n".join(z.prelude) + "\n\n\n" + kernel_src + "\n"}


# ------------------------------------------------------------------------------- execution
class SetupRefused(Exception):
    """The mutated text is not Python the interpreter accepts (a SyntaxError at compile)."""


_DIR: Path | None = None
_WRITTEN: list[Path] = []               # the last mutant files (their source lines stay readable)


def _module_from(source: str) -> types.ModuleType:
    global _DIR
    if _DIR is None:
        _DIR = Path(tempfile.mkdtemp(prefix="kb_fuzz_src_"))
        atexit.register(shutil.rmtree, _DIR, True)
    digest = hashlib.sha256(source.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    path = _DIR / f"mutant_{digest}_{os.getpid()}.py"
    path.write_text(source, encoding="utf-8", errors="surrogatepass")
    if path in _WRITTEN:
        _WRITTEN.remove(path)
    _WRITTEN.append(path)
    while len(_WRITTEN) > 64:          # a long run must not fill the temp directory
        _WRITTEN.pop(0).unlink(missing_ok=True)
    try:
        code = compile(source, str(path), "exec")
    except (SyntaxError, ValueError) as exc:
        raise SetupRefused(f"{type(exc).__name__}: {exc}") from None
    module = types.ModuleType(path.stem)
    module.__file__ = str(path)
    try:
        exec(code, module.__dict__)   # noqa: S102 - the point: run the mutated kernel definition
    except Exception as exc:
        if not raised_by_the_library(exc):   # e.g. an annotation naming nothing: plain Python's error
            raise SetupRefused(f"{type(exc).__name__}: {exc}") from None
        raise
    return module


LIBRARY_DIRS = tuple(str(Path(__file__).resolve().parents[2] / d) + os.sep for d in ("dsl", "bridge"))


def raised_by_the_library(exc: BaseException) -> bool:
    """Whether dsl/ or bridge/ code is on the traceback (else the mutated module's own Python failed)."""
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename.startswith(LIBRARY_DIRS):
            return True
        tb = tb.tb_next
    return False


def standins(case: str, seed: int) -> list:
    import numpy as np
    from interop_tests.kernels_zoo import ZOO_BY_NAME
    return list(ZOO_BY_NAME[case].make(np.random.default_rng(seed), 100).args)


def warm() -> None:
    import dsl  # noqa: F401
    from interop_tests import kernels_zoo
    kernels_zoo.vecadd.ptx(*standins("vecadd", 0), arch="sm_80")    # LLVM's one-time set-up


def execute(spec: dict) -> str:
    module = _module_from(spec["source"])
    kernel = getattr(module, spec["kernel"])
    ptx = kernel.ptx(*standins(spec["case"], spec["standin_seed"]), arch="sm_80")
    if not isinstance(ptx, str) or ".entry" not in ptx:
        from interop_tests.fuzz.targets import Oracle
        raise Oracle(f".ptx() returned {type(ptx).__name__} without an .entry: {str(ptx)[:200]!r}")
    if spec["ptxas"]:
        assemble_or_report(ptx)
    return f"ptx {len(ptx)} chars"


def assemble_or_report(ptx: str) -> None:
    """ptxas must accept what the DSL emits; no ptxas here means nothing to check."""
    from dsl.backend.ptxas import PtxasError, PtxasNotFound, assemble
    from interop_tests.fuzz.targets import Oracle
    try:
        assemble(ptx, "sm_80")
    except PtxasNotFound:
        return
    except PtxasError as exc:
        raise Oracle(f"ptxas refused PTX the DSL produced: {str(exc).splitlines()[1:3]}\n{exc}") from None


def allowed(exc: BaseException, spec: dict) -> bool:
    from bridge.errors import LaunchContractError
    from dsl import DslCompileError
    return isinstance(exc, (DslCompileError, LaunchContractError, SetupRefused))
