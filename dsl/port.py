"""`python -m dsl port kernels.cu --kernel saxpy`: a DSL kernel file with the C++ kernel's signature, and
a test that compares the two (bridge.testing.assert_equivalent).

Why from the contract: the C++ kernel's `KB_CONTRACT` already says its argument dtypes, ranks, which
arguments it writes, its block and its relations, so the DSL signature follows from it. The contract
is read from a built module, or from the source compiled to PTX by nvcc (the real macros, not a second
reader of them). Size scalars that a relation ties to an array extent (`len(x) == n`) are dropped,
because DSL arrays carry their shape; the relations are rewritten without them (through the native
relation parser's tree). The body stays the user's: the generated file quotes the C++ body and says
plainly that the test fails until the port computes the same thing. The test names the C++ file by a
path relative to itself and reads its contract when it runs (`load_cpp_contract`), so it holds nothing
of the machine that made it and follows a changed KB_CONTRACT; it passes the launch grid explicitly
(`GRID`), which the user must give when the C++ contract derives none.
"""
from __future__ import annotations

import json
import keyword
import os
import re
import subprocess
import tempfile
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bridge import dtypes
from dsl.errors import DslToolError
from dsl.types import PUBLIC_NAME

TEMPLATES = Path(__file__).resolve().parent / "templates"
# contract dtype name -> the dsl name a port imports (the dtype table's kernel rows; bool is `boolean`)
DSL_TYPES = {row.name: PUBLIC_NAME.get(row.name, row.name) for row in dtypes.kernel_rows()}
MODULE_SUFFIXES = (".fatbin", ".cubin", ".ptx")
_SYMBOLS = {"add": "+", "sub": "-", "mul": "*", "floordiv": "//", "mod": "%"}
_PREC = {"add": 1, "sub": 1, "mul": 2, "floordiv": 2, "mod": 2, "neg": 3}


class PortError(DslToolError):
    """A port that cannot be made (no contract, a type the DSL lacks, a file that would be lost)."""


class NoCompilerError(PortError):
    """nvcc is needed (to read the contract of a .cu source, or to build it) and was not found."""


def render_template(name: str, values: dict[str, str]) -> str:
    """Template file `dsl/templates/<name>` with every `@@KEY@@` replaced (all keys must be given)."""
    text = (TEMPLATES / name).read_text()
    for k, v in values.items():
        text = text.replace(f"@@{k}@@", v)
    left = re.findall(r"@@[A-Z_]+@@", text)
    if left:
        raise PortError(f"template {name}: no value for {', '.join(sorted(set(left)))}")
    return text


# ------------------------------------------------------------------------------------------ contract
def _nvcc() -> str:
    from dsl.backend.toolkit import find_tool
    nvcc = find_tool("nvcc")
    if nvcc is None:
        raise NoCompilerError("nvcc not found (set KB_NVCC or CUDA_HOME, or put the toolkit's bin/ on PATH); or give "
                        "--module with a built fatbin/cubin/PTX of the kernel")
    return nvcc


def compile_source(source: Path, out: Path, mode: str = "-ptx", arch: str = "sm_90",
                   includes: tuple[str, ...] = ()) -> Path:
    """nvcc `mode` (-ptx, -cubin, -fatbin) of a .cu file with kernelbridge's headers on the path."""
    import bridge
    cmd = [_nvcc(), mode, f"-arch={arch}", "-std=c++17", f"-I{bridge.cpp_kernels.include_dir()}",
           f"-I{source.resolve().parent}", *[f"-I{d}" for d in includes], str(source), "-o", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise PortError(f"nvcc could not compile {source} ({proc.returncode}):\n{proc.stdout}{proc.stderr}")
    return out


def read_contracts(source: Path | None, module: Path | None, arch: str = "sm_90",
                   includes: tuple[str, ...] = ()) -> dict[str, str]:
    """Kernel name -> contract JSON, from a built module or from the source compiled to PTX."""
    from bridge.fatbin import embedded_contracts
    if module is not None:
        if not module.is_file():
            raise PortError(f"--module: no such file: {module}")
        return dict(embedded_contracts(module.read_bytes()))
    assert source is not None
    with tempfile.TemporaryDirectory() as tmp:
        ptx = compile_source(source, Path(tmp) / "contracts.ptx", "-ptx", arch, includes)
        return dict(embedded_contracts(ptx.read_bytes()))


def cpp_body(text: str, kernel: str) -> tuple[int, list[str]] | None:
    """(first line number, lines) of the definition of `__global__ ... kernel(...) { ... }`."""
    m = re.search(r"__global__[^;{}]*?\b" + re.escape(kernel) + r"\s*\(", text)
    if m is None:
        return None
    depth, i, start = 0, m.start(), None
    while i < len(text):
        ch = text[i]
        if text.startswith("//", i):
            i = text.find("\n", i)
            i = len(text) if i < 0 else i
            continue
        if text.startswith("/*", i):
            i = text.find("*/", i + 2)
            i = len(text) if i < 0 else i + 2
            continue
        if ch in "\"'":
            j = i + 1
            while j < len(text) and text[j] != ch:
                j += 2 if text[j] == "\\" else 1
            i = j + 1
            continue
        if ch == "{":
            depth += 1
            start = i if start is None else start
        elif ch == "}":
            depth -= 1
            if depth == 0 and start is not None:
                begin = text.rfind("\n", 0, m.start()) + 1        # from the start of its line
                line = text.count("\n", 0, begin) + 1
                return line, text[begin:i + 1].splitlines()
        elif ch == ";" and start is None:
            return None                       # a declaration, not the definition
        i += 1
    return None


# ---------------------------------------------------------------------------------------- signature
@dataclass
class Port:
    kernel: str
    params: list[str] = field(default_factory=list)
    decorator: list[str] = field(default_factory=list)
    requires: list[str] = field(default_factory=list)
    dropped: dict[str, str] = field(default_factory=dict)       # size scalar -> the term it equals
    notes: list[str] = field(default_factory=list)
    imports: set[str] = field(default_factory=set)
    domain: int = 1


def py_name(name: str) -> str:
    """C++ names that are Python keywords get PEP 8's trailing underscore (`in` -> `in_`); bridge.testing
    matches `in_` with `in`."""
    return name + "_" if keyword.iskeyword(name) else name


def _render(node: dict, subst: dict[str, str]) -> str:
    op = node["op"]
    if op == "lit":
        return str(node["value"])
    if op == "scalar":
        return subst.get(node["arg"], py_name(node["arg"]))
    if op in ("grid", "block"):         # launch terms grid.x / block.y ...
        return f"{op}.{'xyz'[node['axis']]}"
    arg = py_name(node.get("arg", ""))
    if op == "len":
        return f"len({arg})"
    if op == "shape_k":
        return f"{arg}.shape[{node['axis']}]"
    if op in ("shape", "size", "ndim"):
        return f"{arg}.{op}"
    kids = node.get("operands", [])
    if op == "tuple":
        items = [_render(k, subst) for k in kids]
        return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"

    def wrap(k: dict, prec: int) -> str:
        text = _render(k, subst)
        return f"({text})" if _PREC.get(k["op"], 9) < prec else text
    if op == "neg":
        return "-" + wrap(kids[0], 3)
    p = _PREC[op]
    return f"{wrap(kids[0], p)} {_SYMBOLS[op]} {wrap(kids[1], p + 1)}"


def _items(node: dict, n: int) -> list[dict]:
    if node["op"] == "tuple":
        return node["operands"]
    return [{"op": "shape_k", "arg": node["arg"], "axis": k} for k in range(n)]


def _atoms(tree: dict) -> list[tuple[dict, str, dict]]:
    """Binary comparisons (chains and `and` split; `x.shape == (n, m)` split per axis)."""
    if tree["op"] == "and":
        return [a for k in tree["operands"] for a in _atoms(k)]
    kids = tree["operands"]
    out = []
    for k, op in enumerate(tree["ops"]):
        a, b = kids[k], kids[k + 1]
        lits = [x for x in (a, b) if x["op"] == "tuple"]
        if op == "==" and lits and {a["op"], b["op"]} <= {"tuple", "shape"}:
            n = len(lits[0]["operands"])
            out.extend((x, "==", y) for x, y in zip(_items(a, n), _items(b, n)))
        else:
            out.append((a, op, b))
    return out


def rewrite_relations(contract: Any) -> tuple[list[str], dict[str, str]]:
    """The relations without the size scalars they define: (requires texts, scalar -> term)."""
    ints = {a["name"] for a in contract.args if a["kind"] == "scalar" and a["dtype"] in DSL_TYPES
            and a["dtype"] not in ("f16", "bf16", "f32", "f64")}
    atoms = [a for tree in contract.relation_trees for a in _atoms(tree)]
    subst: dict[str, str] = {}
    for left, op, right in atoms:
        for x, y in ((left, right), (right, left)):
            if op == "==" and x["op"] == "scalar" and x["arg"] in ints and x["arg"] not in subst \
                    and y["op"] in ("len", "shape_k", "size"):
                subst[x["arg"]] = _render(y, {})
    out: list[str] = []
    for left, op, right in atoms:
        a, b = _render(left, subst), _render(right, subst)
        if a == b and op in ("==", "<=", ">="):
            continue
        text = f"{a} {op} {b}"
        if text not in out and f"{b} {op} {a}" not in out:
            out.append(text)
    return out, subst


def port_of(contract: Any) -> Port:
    """The DSL signature and decorator for a C++ contract."""
    p = Port(contract.kernel, domain=contract.domain)
    p.requires, p.dropped = rewrite_relations(contract)
    p.imports.add("simt")
    for i, a in enumerate(contract.args):
        name = py_name(a["name"])
        dt = DSL_TYPES.get(a["dtype"])
        if dt is None:
            raise PortError(f"{contract.kernel}: argument '{a['name']}' (#{i}): the DSL has no {a['dtype']} type "
                            f"(it has {', '.join(DSL_TYPES)})")
        if a["kind"] == "scalar":
            if a["name"] not in p.dropped:
                p.params.append(f"{name}: {dt}")
                p.imports.add(dt)
            continue
        p.imports.add(dt)
        nd = a["ndim"]
        if nd < 0:
            nd = 1
            p.notes.append(f"'{a['name']}' may have any rank in the C++ contract: the port takes 1-D; change it")
        if nd > 3:
            raise PortError(f"{contract.kernel}: argument '{a['name']}' (#{i}) is {nd}-d; DSL arrays have 1 to 3 "
                            f"axes")
        kind = "Array" if a["access"] == "read" else "DisjointSlice"
        p.params.append(f"{name}: simt.{kind}[{dt}{'' if nd == 1 else f', {nd}'}]")
    p.decorator = _decorator(contract, p.requires)
    for s, term in p.dropped.items():
        p.notes.append(f"'{s}' is not an argument here: it is {term}")
    grid_from = contract.grid_from
    if grid_from is None:
        p.notes.append("the C++ kernel takes its grid from the caller (no KB_GRID_FROM); set GRID in the test to the "
                       "grid the C++ application launches it with")
    elif tuple(contract.per_thread) != (1, 1, 1):
        p.notes.append(f"the C++ grid comes from '{grid_from}' with {tuple(contract.per_thread)} items per thread; "
                       f"the port's grid comes from the DisjointSlice it writes at its ThreadIndex")
    return p


def _decorator(contract: Any, requires: list[str]) -> list[str]:
    out = []
    if contract.domain != 1:
        out.append(f"domain={contract.domain}")
    block = contract.block_exact
    if block is not None:
        dims = list(block)
        while len(dims) > 1 and dims[-1] == 1:
            dims.pop()
        out.append(f"block={dims[0]}" if len(dims) == 1 else f"block={tuple(dims)}")
    elif contract.max_threads:
        out.append(f"launch_bounds={contract.max_threads}")
    kind, smem = contract.dynamic_smem
    if kind == "max":
        out.append(f"shared_mem=('max', {smem})")
    elif smem:
        out.append(f"shared_mem={smem}")
    if contract.min_cc:
        out.append(f"min_cc={contract.min_cc}")
    if requires:
        out.append("requires=[" + ", ".join(json.dumps(r) for r in requires) + "]")
    if contract.inplace:
        out.append("inplace=[" + ", ".join(f"({py_name(a)!r}, {py_name(b)!r})" for a, b in contract.inplace) + "]")
    return out


# ---------------------------------------------------------------------------------------------- files
_INDEX = {1: "i = simt.thread.index_1d()", 2: "r, c = simt.thread.index_2d()",
          3: "d, r, c = simt.thread.index_3d()"}


_GRID_DERIVED = """\
# The launch grid of both kernels: None lets each derive its own. The C++ contract derives it from
# '{grid_from}' (KB_GRID_FROM); a port whose contract derives none runs with the C++ kernel's grid.
GRID = None"""
_GRID_GIVEN = """\
# The launch grid of both kernels. The C++ contract has no KB_GRID_FROM: its grid is the caller's, and
# no grid that covers the work follows from the contract. Give the one the C++ application launches
# with: a tuple, or a function of the sizes dict (array shapes by name), e.g. lambda s: (s["x"][0],).
GRID = None   # PORT_TODO: the grid the C++ application launches {kernel} with"""


def _relative(path: str, what: str) -> str:
    if Path(path).is_absolute():
        raise PortError(f"{what}: expected a path relative to the test file's folder, got the absolute {path!r} "
                        f"(a generated test holds no path of the machine that made it)")
    return Path(path).as_posix()


def port_files(contract_json: str, source: Path | None, source_text: str | None, cpp_path: str,
               includes: tuple[str, ...] = ()) -> dict[str, str]:
    """File name -> text of the port and its test. `cpp_path` and `includes`: paths relative to the
    folder the files are written to (the test resolves them against its own location at run time)."""
    from bridge import _native
    contract = _native.Contract(contract_json)
    p = port_of(contract)
    name = contract.kernel
    quoted = ["    # C++ original, for reference:"]
    body = cpp_body(source_text, name) if source_text else None
    if body is not None:
        line, lines = body
        quoted = [f"    # C++ original ({source.name if source else 'source'}:{line}), for reference:"]
        quoted += [f"    #   {x}".rstrip() for x in lines]
    else:
        quoted.append("    #   (no C++ source was given: pass the .cu file to quote its body here)")
    dec = ", ".join(p.decorator)
    if len(dec) > 80:
        dec = "\n    " + ",\n    ".join(p.decorator) + ",\n"
    imports = sorted(p.imports - {"simt"}, key=lambda t: list(DSL_TYPES.values()).index(t)) + ["simt"]
    dropped = ""
    if p.dropped:
        dropped = ("\nIts size argument(s) " + ", ".join(p.dropped) + " are gone: DSL arrays carry their shape.")
    notes = "".join(textwrap.fill(f"Note: {n}.", 100, initial_indent="# ", subsequent_indent="#   ") + "\n"
                    for n in p.notes)
    cpp_rel = _relative(cpp_path, "cpp_path")
    values = {"KERNEL": name, "SOURCE": source.name if source else cpp_rel, "DROPPED": dropped,
              "TEST_FILE": f"test_{name}_port.py", "DSL_IMPORTS": ", ".join(imports),
              "NOTES": notes, "DECORATOR": dec,
              "PARAMS": ", ".join(p.params), "CPP_BODY": "\n".join(quoted), "INDEX": _INDEX[p.domain]}
    grid = (_GRID_DERIVED.format(grid_from=contract.grid_from) if contract.grid_from is not None
            else _GRID_GIVEN.format(kernel=name))
    inc = "".join(f"HERE / {_relative(d, 'includes')!r}, " for d in includes)
    test_values = {"KERNEL": name, "SOURCE": source.name if source else cpp_rel, "CPP_PATH": repr(cpp_rel),
                   "INCLUDES": inc, "GRID": grid}
    return {f"{name}_port.py": render_template("port/kernel.py.in", values),
            f"test_{name}_port.py": render_template("port/test.py.in", test_values)}


def write_port(source: Path | None, kernel: str | None, out_dir: Path, module: Path | None = None,
               arch: str = "sm_90", includes: tuple[str, ...] = (), force: bool = False) -> list[Path]:
    """Write `<kernel>_port.py` and `test_<kernel>_port.py` into out_dir; returns their paths."""
    if source is not None and not source.is_file():
        raise PortError(f"no such file: {source}")
    contracts = read_contracts(source, module, arch, includes)
    if not contracts:
        raise PortError(f"{module or source} holds no kernel with a launch contract (KB_CONTRACT); see docs/cpp.md")
    if kernel is None or kernel not in contracts:
        what = "give --kernel" if kernel is None else f"no kernel {kernel!r} with a contract"
        raise PortError(f"{what}: {module or source} has {', '.join(sorted(contracts))}")
    out_dir.mkdir(parents=True, exist_ok=True)
    here = out_dir.resolve()
    cpp_path = os.path.relpath((module or source).resolve(), here)      # relative to the test, always
    rel_includes = tuple(os.path.relpath(Path(d).resolve(), here) for d in includes)
    files = port_files(contracts[kernel], source, source.read_text(errors="replace") if source else None, cpp_path,
                       rel_includes)
    paths = [out_dir / n for n in files]
    existing = [str(x) for x in paths if x.exists()]
    if existing and not force:
        raise PortError(f"would overwrite {', '.join(existing)} (your port may be in it); pass --force to replace")
    for path, text in zip(paths, files.values()):
        path.write_text(text)
    return paths


def load_cpp_contract(path: str | Path, kernel: str, arch: str = "sm_90", includes: tuple[str | Path, ...] = ()) -> Any:
    """The contract `kernel` has now in a built module, or in a .cu source compiled to PTX by nvcc (no
    GPU needed): what a generated test checks, so a changed KB_CONTRACT is seen without re-porting."""
    from bridge import _native
    path = Path(path)
    module = path if path.suffix in MODULE_SUFFIXES else None
    if module is None and not path.is_file():
        raise PortError(f"no such file: {path}")
    contracts = read_contracts(None if module else path, module, arch, tuple(str(d) for d in includes))
    if kernel not in contracts:
        raise PortError(f"no kernel {kernel!r} with a contract: {path} has {', '.join(sorted(contracts)) or 'none'}")
    return _native.Contract(contracts[kernel])


def load_cpp_kernel(path: str | Path, kernel: str, arch: str | None = None,
                    includes: tuple[str | Path, ...] = ()) -> Any:
    """The `bridge.Kernel` `kernel` from a built module, or from a .cu source compiled with nvcc for the
    current GPU (kept in a temporary directory for the process)."""
    import bridge
    path = Path(path)
    if path.suffix not in MODULE_SUFFIXES:
        if arch is None:
            cc = bridge.current_device().cc
            arch = f"sm_{cc[0]}{cc[1]}"
        out = Path(tempfile.mkdtemp(prefix="kb_port_")) / f"{path.stem}.cubin"
        path = compile_source(path, out, "-cubin", arch, tuple(str(d) for d in includes))
    return bridge.load_module(str(path)).get_kernel(kernel)


def cmd_port(args: Any) -> int:
    """The `python -m dsl port` subcommand."""
    source = Path(args.source) if args.source and Path(args.source).suffix not in MODULE_SUFFIXES else None
    module = Path(args.module) if args.module else (Path(args.source) if source is None and args.source else None)
    paths = write_port(source, args.kernel, Path(args.output), module, args.arch, tuple(args.include or ()),
                       args.force)
    for p in paths:
        print(f"wrote {p}")
    print(f"next: write the body of {args.kernel} in {paths[0].name}, delete its PORT_TODO line, and run "
          f"pytest {paths[1]}")
    return 0
