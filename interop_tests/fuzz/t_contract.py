"""Fuzz target `contract`: contract JSON and `requires` relations, then a validation against described arrays.

Inputs start from valid contracts (the documented example and random well-formed ones) and are
mutated at three levels: the dict (wrong types, huge numbers, unknown keys, lone surrogates), the
relation grammar (long left- and right-deep chains, deep unary/parentheses, huge literals, token
soup) and the JSON text (truncation, insertion, nesting bombs). A parsed contract must round-trip
through `to_json`, and a validation that passes must return a launch configuration within the
contract's and the device's limits. Allowed refusals: the bridge's typed errors only.
"""
from __future__ import annotations

import copy
import json
from typing import Any

from interop_tests.fuzz.hostile import FloatLike, HostileError, IntSubclass, RaisingDim, RaisingIndex
from interop_tests.fuzz.targets import Oracle
from interop_tests.contract.contract_support import GOOD_CONTRACT

TIMEOUT = 8.0
INPUTS = 500         # a suite run's inputs (targets.py): about 1 in 60 mutated contracts validates
DTYPES = ["bool", "i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64", "f16", "bf16", "f32", "f64", "c64",
          "c128", "f8e4m3fn", "f8e5m2", "f4e2m1fn", "any"]
SCALAR_DTYPES = ["bool", "i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64", "f16", "bf16", "f32", "f64"]
BASE = 0x7F00_0000_0000
HUGE_INTS = [2**31 - 1, 2**31, 2**32, 2**53 + 1, 2**62, 2**63 - 1, 2**63, 2**64 - 1, 2**64, -2**63, -2**63 - 1,
             10**30, -1, 0]
ODD_JSON_VALUES: list[Any] = [None, True, False, -1, 0, 1.5, -0.0, 1e308, float("inf"), float("nan"), "", "x" * 300,
                              "\u00e9", "\udcff", "\ud800x", "\U0001F600", "\x00", [], {}, [1, 2, 3, 4], {"a": 1},
                              [[[[]]]], *HUGE_INTS]
GOOD = GOOD_CONTRACT


# ------------------------------------------------------------------------------- generation
def _random_contract(rng) -> dict:
    n_arrays, n_scalars = rng.randint(0, 4), rng.randint(0, 2)
    args: list[dict] = []
    for k in range(n_arrays):
        a = {"name": f"a{k}", "kind": "array", "dtype": rng.choice(DTYPES[:-1]), "ndim": rng.randint(1, 3)}
        for key, values in (("layout", ["any", "C", "F"]), ("access", ["read", "write", "readwrite"]),
                            ("abi", ["view", "pointer"]), ("align", [0, 1, 4, 16, 256])):
            if rng.random() < 0.5:
                a[key] = rng.choice(values)
        args.append(a)
    for k in range(n_scalars):
        args.append({"name": f"s{k}", "kind": "scalar", "dtype": rng.choice(SCALAR_DTYPES)})
    rng.shuffle(args)
    d: dict[str, Any] = {"kernel": rng.choice(["k", "vecadd", "k\u00e9", "x" * 64]), "args": args}
    domain = rng.randint(1, 3)
    if rng.random() < 0.7:
        d["domain"] = domain
    r = rng.random()
    if r < 0.4:
        dims = [rng.choice([1, 2, 8, 32, 64, 128, 256]) for _ in range(rng.randint(1, 3))]
        while dims[0] * (dims[1] if len(dims) > 1 else 1) * (dims[2] if len(dims) > 2 else 1) > 1024:
            dims[rng.randrange(len(dims))] = 1
        d["block"] = {"exact": dims}
    elif r < 0.7:
        d["block"] = {"max_threads": rng.choice([1, 64, 256, 1024])}
    if rng.random() < 0.4:
        d["dynamic_smem"] = rng.choice([{"exact": rng.choice([0, 1024, 49152])}, {"max": rng.choice([0, 65536])}])
    if rng.random() < 0.3:
        d["min_cc"] = rng.choice([0, 50, 80, 90, 100])
    if rng.random() < 0.6:
        d["requires"] = [_relation(rng, args) for _ in range(rng.randint(1, 3))]
    arrays = [a["name"] for a in args if a["kind"] == "array"]
    if len(arrays) >= 2 and rng.random() < 0.3:
        d["inplace"] = [rng.sample(arrays, 2)]
    writable = [a for a in args if a["kind"] == "array" and a.get("ndim", 1) >= domain]
    if writable and rng.random() < 0.6:
        d["grid_from"] = {"arg": rng.choice(writable)["name"]}
        if rng.random() < 0.3:
            d["grid_from"]["per_thread"] = [rng.choice([1, 2, 4]) for _ in range(rng.randint(1, 3))]
    if arrays and rng.random() < 0.2:
        d["fault_sites"] = [{"id": i + 1, "array": rng.choice(arrays), "file": "k.py", "line": i, "text": "a[j]"}
                            for i in range(rng.randint(1, 3))]
    return d


def _term(rng, arrays: list[str], scalars: list[str], depth: int, wild: bool) -> str:
    r = rng.random()
    if depth > 3 or r < 0.15:
        return str(rng.choice([0, 1, 2, 7, 1024, *HUGE_INTS, 99999999999999999999] if wild else [0, 1, 2, 7, 1024]))
    if arrays and r < 0.55:
        a = rng.choice(arrays)
        axis = rng.choice([0, 1, 2, -1, -3, 9, 2**63] if wild else [0, -1])
        return rng.choice([f"len({a})", f"{a}.shape[{axis}]", f"{a}.size", f"{a}.ndim"]
                          + ([f"{a}.shape"] if wild else []))
    if scalars and r < 0.7:
        return rng.choice(scalars)
    if r < 0.85:
        return f"({_expr(rng, arrays, scalars, depth + 1, wild)})"
    return rng.choice(["-", "+", "--"]) + _term(rng, arrays, scalars, depth + 1, wild)


def _expr(rng, arrays: list[str], scalars: list[str], depth: int = 0, wild: bool = False) -> str:
    out = _term(rng, arrays, scalars, depth, wild)
    ops = ['+', '-', '*', '//', '%', '/', '**', '<<'] if wild else ['+', '-', '*', '//', '%']
    for _ in range(rng.randint(0, 3)):
        out += f" {rng.choice(ops)} {_term(rng, arrays, scalars, depth + 1, wild)}"
    return out


def _relation(rng, args: list[dict]) -> str:
    arrays = [a["name"] for a in args if a["kind"] == "array"] or ["q"]
    scalars = [a["name"] for a in args if a["kind"] == "scalar"]
    r = rng.random()
    if r < 0.12:   # long chains: the parser and every evaluator must bound their depth
        n = rng.choice([10, 100, 1000, 5000, 20000])
        a = arrays[0]
        return rng.choice([f"len({a})" + " + 0" * n + f" == len({a})",
                           "(" * n + f"len({a})" + ")" * n + " >= 0",
                           "0 + (" * n + "0" + ")" * n + f" == len({a}) - len({a})",
                           "-" * n + f"len({a}) <= 0",
                           " and ".join([f"len({a}) >= 0"] * n),
                           "(" + ", ".join([f"len({a})"] * n) + f") == (len({a}),)",
                           f"len({a})" + " < len(" + a + ")" * 0 + " <= 1" * n])
    if r < 0.2:    # token soup
        toks = ["len", "(", ")", "[", "]", ".", "shape", "size", "ndim", ",", "==", "<", "and", "or", "not", "+",
                "*", "//", "%", "0", "9" * 30, "\u00e9", "\udcff", "\x00", "$", "'", '"', "\\", *arrays, *scalars]
        return " ".join(rng.choice(toks) for _ in range(rng.randint(1, 12)))
    parts = []
    wild = rng.random() < 0.3
    for _ in range(rng.randint(1, 3)):
        cmp = f"{_expr(rng, arrays, scalars, wild=wild)} {rng.choice(['==', '!=', '<', '<=', '>', '>='])} " \
              f"{_expr(rng, arrays, scalars, wild=wild)}"
        if rng.random() < 0.2:
            cmp += f" {rng.choice(['<', '<=', '=='])} {_expr(rng, arrays, scalars, wild=wild)}"
        parts.append(cmp)
    return " and ".join(parts)


def _paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _paths(v, prefix + (i,))
    return out


def _mutate_dict(rng, d: dict) -> None:
    paths = [p for p in _paths(d) if p]
    if not paths:
        return
    path = rng.choice(paths)
    parent = d
    for k in path[:-1]:
        parent = parent[k]
    r = rng.random()
    if r < 0.2 and isinstance(parent, dict):
        del parent[path[-1]]
    elif r < 0.3 and isinstance(parent, dict):
        parent[rng.choice(["speed", "kernel2", "\u00e9", "\udcff", ""])] = copy.deepcopy(rng.choice(ODD_JSON_VALUES))
    elif r < 0.4 and isinstance(parent, list):
        parent.append(copy.deepcopy(rng.choice(parent)) if parent else 1)   # e.g. a duplicate argument
    else:
        parent[path[-1]] = copy.deepcopy(rng.choice(ODD_JSON_VALUES))


PALETTE = ["{", "}", "[", "]", '"', ",", ":", "\\", "\\u", "\\ud800", "\\udcff", "\x00", "\u00e9", "\udcff",
           "\ud800", "\U0001F600", " ", "0", "-", "1e999", "9" * 40, "e", "n", "null", "\n", "\x7f", "\xff"]


def _mutate_text(rng, text: str) -> str:
    n = len(text)
    at = rng.randint(0, n)
    r = rng.random()
    if r < 0.2:
        return text[:at]
    if r < 0.45:
        return text[:at] + "".join(rng.choice(PALETTE) for _ in range(rng.randint(1, 4))) + text[at:]
    if r < 0.6:
        end = min(n, at + rng.randint(1, 20))
        return text[:at] + text[end:]
    if r < 0.7:
        end = min(n, at + rng.randint(1, 40))
        return text[:end] + text[at:end] * rng.randint(1, 50) + text[end:]
    if r < 0.8:   # nesting bombs: the parser must bound its depth
        depth = rng.choice([65, 1000, 100000])
        return rng.choice(["[" * depth + "]" * depth, "{\"a\":" * depth + "1" + "}" * depth, "[" * depth])
    if r < 0.9:
        return text.replace('"kernel":', '"kernel":' + '"' + rng.choice(["x" * 100000, "\\u00e9" * 1000]) + '",'
                            + '"kernel_":', 1)
    return text[:at] + chr(rng.randint(0, 0x10FFFF)) + text[at:]


def _desc_spec(rng, arg: dict | None, shape_pool: list[tuple], clean: bool) -> tuple:
    """A described array (plain tuple) that fits `arg` when `clean`, else mostly fits, sometimes badly."""
    ndim = arg.get("ndim", 1) if isinstance(arg, dict) and isinstance(arg.get("ndim"), int) else 1
    ndim = ndim if 0 <= ndim <= 4 else 1
    if shape_pool and rng.random() < (0.9 if clean else 0.5):
        shape = list(rng.choice(shape_pool))[:ndim]
        shape += [shape[-1] if shape else 10] * (ndim - len(shape))
    else:
        shape = [rng.choice([1, 3, 10, 64, 257, 1000]) for _ in range(ndim)]
        shape_pool.append(tuple(shape))
    dtype = arg.get("dtype") if isinstance(arg, dict) and isinstance(arg.get("dtype"), str) else "f32"
    dtype = rng.choice(["f32", "i32", "u8"]) if dtype == "any" else dtype
    ptr = BASE + rng.randrange(1, 64) * 0x1000_0000
    if clean:
        return ("array", ptr, shape, None, dtype, 2, 0, False)
    if shape and rng.random() < 0.15:
        shape[rng.randrange(len(shape))] = rng.choice([0, -1, 2**31, 2**62, 2**63 - 1])
    if rng.random() < 0.1:
        shape = shape + [rng.randint(1, 4)] * rng.randint(1, 8)
    if rng.random() < 0.15:
        dtype = rng.choice(DTYPES[:-1] + ["float32", "", "\u00e9"])
    strides = None
    if rng.random() < 0.3:
        strides = [rng.choice([0, 1, 4, -4, 8, 4096, 2**40, -2**62, 2**63 - 1]) for _ in shape]
    ptr += rng.choice([0, 0, 0, 1, 2, 8])
    if rng.random() < 0.1:
        ptr = rng.choice([0, 2**64 - 4, 2**63, 2**64 - 1])
    device_type = rng.choice([2, 2, 2, 2, 2, 2, 1, 3, 13, 7, -1])
    return ("array", ptr, shape, strides, dtype, device_type, rng.choice([0] * 6 + [1, -1]), rng.random() < 0.1)


SCALARS: list[Any] = [0, 1, -1, 3, 7, 255, 256, 2**31, 2**63 - 1, 2**63, 2**64, -2**63 - 1, 1.5, float("nan"),
                      float("inf"), True, None, "3", RaisingIndex(), FloatLike(2.0), IntSubclass(5),
                      ("np", "float32", 1.0), ("np", "int64", -5), ("np", "uint64", 2**64 - 1), ("np", "bool_", True),
                      ("np", "float16", 65504.0)]
DIM_ATOMS: list[Any] = [1, 2, 32, 64, 128, 256, 1024, 1025, 0, -1, 2**31, 2**64, -0.0, 64.0, True, None, "64",
                        RaisingDim(), IntSubclass(32), ("np", "int64", 64), ("np", "uint64", 2**64 - 1)]


def _dims(rng, clean: bool) -> Any:
    r = rng.random()
    if r < 0.25 or (clean and r < 0.6):
        return None
    if clean:
        return tuple(rng.choice([1, 2, 32, 64, 128, 256]) for _ in range(rng.randint(1, 3)))
    if r < 0.55:
        return rng.choice(DIM_ATOMS)
    items = [rng.choice(DIM_ATOMS[:8]) if rng.random() < 0.8 else rng.choice(DIM_ATOMS) for _ in range(rng.randint(0, 4))]
    return tuple(items) if rng.random() < 0.8 else items


def generate(rng) -> dict:
    d = json.loads(json.dumps(GOOD)) if rng.random() < 0.3 else _random_contract(rng)
    args = [a for a in d.get("args", []) if isinstance(a, dict)]
    if rng.random() < 0.3 and "requires" in d:
        d["requires"].append(_relation(rng, args))
    for _ in range(rng.choice([0, 0, 0, 0, 1, 1, 2, 3])):
        _mutate_dict(rng, d)
    text = json.dumps(d, ensure_ascii=rng.random() < 0.8, allow_nan=True)
    for _ in range(rng.choice([0, 0, 0, 0, 0, 0, 1, 1, 2])):
        text = _mutate_text(rng, text)
    pool: list[tuple] = []
    call_args = []
    clean = rng.random() < 0.5          # arguments that fit, so validation reaches its later steps
    for a in args:
        if a.get("kind") == "scalar" and (clean or rng.random() < 0.9):
            call_args.append(("scalar", rng.choice(SCALARS[:5] if clean else SCALARS)))
        else:
            call_args.append(_desc_spec(rng, a, pool, clean))
    if not clean and rng.random() < 0.1:
        call_args = call_args[:-1] if call_args and rng.random() < 0.5 else call_args + [_desc_spec(rng, None, pool, False)]
    limits = {}
    if rng.random() < 0.2:
        limits = {rng.choice(["cc", "max_threads_per_block", "smem_per_block", "smem_per_block_optin", "sm_count"]):
                  rng.choice([0, 1, 32, 2**31 - 1])}
        if rng.random() < 0.3:
            limits["host_memory"] = True
    smem = rng.choice([None, None, 0, 1024, 49153, -1, 2**40, 1.5, RaisingDim(), ("np", "int32", 4)])
    if clean:
        smem = rng.choice([None, 0, 1024, 49153])
    return {"text": text, "args": call_args, "grid": _dims(rng, clean), "block": _dims(rng, clean), "smem": smem,
            "limits": limits}


# ------------------------------------------------------------------------------- execution
class SetupRefused(Exception):
    """The scaffolding (an ArrayDesc from nonsense numbers) was refused with an ordinary error."""


def _value(v: Any) -> Any:
    if isinstance(v, tuple) and len(v) == 3 and v[0] == "np":
        import numpy as np
        return getattr(np, v[1])(v[2])
    if isinstance(v, tuple):
        return tuple(_value(x) for x in v)
    if isinstance(v, list):
        return [_value(x) for x in v]
    return v


def _limits(overrides: dict) -> Any:
    from bridge import _native
    d = _native.DeviceLimits()
    d.device_id, d.cc, d.max_threads_per_block = 0, 90, 1024
    d.max_block, d.max_grid = (1024, 1024, 64), (2147483647, 65535, 65535)
    d.smem_per_block, d.smem_per_block_optin, d.sm_count = 49152, 232448, 132
    for k, v in overrides.items():
        setattr(d, k, v)
    return d


def _attrs() -> Any:
    from bridge import _native
    a = _native.FuncAttrs()
    a.max_threads_per_block, a.static_smem, a.num_regs, a.max_dynamic_smem = 1024, 0, 32, 49152
    return a


def warm() -> None:
    from bridge import _native  # noqa: F401


def _check_round_trip(c: Any) -> None:
    from bridge import _native
    text = c.to_json()
    again = _native.Contract(text)
    if again.to_json() != text:
        raise Oracle(f"to_json does not round-trip:\n first: {text[:500]}\nsecond: {again.to_json()[:500]}")
    _ = (c.kernel, c.args, c.requires, c.inplace, c.grid_from, c.block_exact, c.max_threads, c.dynamic_smem,
         c.fault_sites, repr(c))


def _check_config(c: Any, lim: Any, grid: tuple, block: tuple) -> None:
    if len(block) != 3 or len(grid) != 3:
        raise Oracle(f"validate returned a configuration that is not 3-D: grid={grid} block={block}")
    threads = block[0] * block[1] * block[2]
    if min(block) < 1 or any(b > m for b, m in zip(block, lim.max_block)) or threads > lim.max_threads_per_block:
        raise Oracle(f"validate passed block={block} outside the device limits {lim.max_block} / "
                     f"{lim.max_threads_per_block} threads")
    if c.block_exact and tuple(c.block_exact) != tuple(block):
        raise Oracle(f"validate passed block={block} for a contract with exact block {c.block_exact}")
    if c.max_threads and threads > c.max_threads:
        raise Oracle(f"validate passed block={block} over the contract's max_threads {c.max_threads}")
    if min(grid) < 0 or any(g > m for g, m in zip(grid, lim.max_grid)):
        raise Oracle(f"validate passed grid={grid} outside the device limits {lim.max_grid}")


def execute(spec: dict) -> str:
    from bridge import _native
    c = _native.Contract(spec["text"])
    _check_round_trip(c)
    call_args = []
    for a in spec["args"]:
        if a[0] == "scalar":
            call_args.append(_value(a[1]))
            continue
        try:
            call_args.append(_native.ArrayDesc(*a[1:]))
        except (TypeError, ValueError, OverflowError) as exc:
            raise SetupRefused(f"ArrayDesc{a[1:]!r}: {type(exc).__name__}: {exc}") from None
    lim = _limits(spec["limits"])
    grid, block = _native.validate(c, call_args, grid=_value(spec["grid"]), block=_value(spec["block"]),
                                   smem=_value(spec["smem"]), limits=lim, attrs=_attrs())
    _check_config(c, lim, tuple(grid), tuple(block))
    return f"valid grid={tuple(grid)} block={tuple(block)}"


def allowed(exc: BaseException, spec: dict) -> bool:
    from bridge.errors import LaunchContractError
    return isinstance(exc, (LaunchContractError, SetupRefused, HostileError))
