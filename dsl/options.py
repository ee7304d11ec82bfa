"""Options of one @simt.kernel / @tile.kernel: the launch contract facts plus compile switches.

`simt_options(...)` and `check_tile_options(...)` check what a decorator was given before anything
uses it (LLVM aborts the process on attributes such as `.reqntid 0`), raising `OptionError`; the
decorators turn that into a `DslCompileError` at the `def` (dsl/frontend/decorator.py). Kept free of
heavy imports: this module is on the cache-hit path.
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass, field
from typing import Any

from bridge.settings import env_switch   # the one KB_* reader
from dsl.errors import DslDeclarationError

MAX_BLOCK = (1024, 1024, 64)     # CUDA's per-axis block limits (every supported arch)
MAX_THREADS = 1024               # threads per block
MIN_CC, MAX_CC = 50, 129         # compute capabilities sm_50 .. sm_12x (0 = no minimum)
MAX_SHARED_MEM = (1 << 32) - 1   # the driver takes dynamic shared memory as an unsigned 32-bit count
_TERMS = ("len", "shape", "size", "ndim")
_LAUNCH = ("grid", "block")      # launch terms grid.x|y|z, block.x|y|z (the contract's relation language)


@dataclass(frozen=True)
class KernelOptions:
    block: tuple[int, int, int] | None = None      # exact block (contract + .reqntid)
    launch_bounds: int | None = None               # max threads per block (contract + .maxntid)
    domain: int = 1                                # 1, 2 or 3
    shared_mem: int | tuple[str, int] = 0          # dynamic smem bytes, or ("max", n)
    min_cc: int = 0                                # e.g. 80
    requires: tuple[str, ...] = ()                 # contract relations, also used for proofs
    inplace: tuple[tuple[str, str], ...] = ()      # argument pairs allowed to overlap
    boundscheck: bool = True                       # False removes run-time checks (unsafe)
    fastmath: bool = False                         # approximate math (ex2.approx etc.); implies ftz
    ftz: bool = False                              # f32 denormals flushed to zero (nvcc -ftz=true)
    extra: tuple[tuple[str, object], ...] = field(default_factory=tuple)
    grid_from: str | None = None                   # the array a grid-less launch derives its grid from
    lineinfo: bool = True                          # PTX line tables (.file/.loc) for profilers/sanitizers
    # launch features (dsl/vocab/launch.py; the contract's "pdl", "cooperative", "cluster")
    pdl: bool = False                              # programmatic dependent launch (griddepcontrol.wait)
    cooperative: bool = False                      # grid-wide sync: every block co-resident
    cluster: tuple[int, int, int] | None = None    # thread-block cluster (.reqnctapercluster)
    cluster_nonportable: bool = False              # a cluster of 9 to 16 blocks (sm_90's non-portable sizes)

    @property
    def launch(self) -> "LaunchFeatures":
        """The launch-feature options as the one object both models carry."""
        return LaunchFeatures(self.pdl, self.cooperative, self.cluster, self.cluster_nonportable)


class OptionError(DslDeclarationError):
    """A decorator option is malformed. `option` names the keyword, `item` the offending element
    (a relation text, a parameter name) when there is one, so the error can point at it."""

    def __init__(self, option: str, message: str, hint: str = "", item: Any = None) -> None:
        super().__init__(message)
        self.option, self.message, self.hint, self.item = option, message, hint, item


def _is_int(v: Any) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def _kind(v: Any) -> str:
    return f"{type(v).__name__} {v!r}" if not isinstance(v, (list, tuple)) else repr(v)


def check_block(block: Any) -> tuple[int, int, int] | None:
    """`block=`: an int or 1 to 3 ints, each >= 1, within CUDA's per-axis and total limits."""
    if block is None:
        return None
    hint = "give the exact block as an int or a tuple of 1 to 3 ints, e.g. block=256 or block=(16, 16)"
    dims = (block,) if not isinstance(block, (tuple, list)) else tuple(block)
    if not 1 <= len(dims) <= 3 or not all(_is_int(d) for d in dims):
        raise OptionError("block", f"block= must be an int or a tuple of 1 to 3 ints, got {_kind(block)}",
                          hint)
    full = tuple(int(d) for d in dims) + (1,) * (3 - len(dims))
    for axis, (d, limit) in enumerate(zip(full, MAX_BLOCK)):
        if not 1 <= d <= limit:
            raise OptionError("block", f"block= {tuple(full)}: the {'xyz'[axis]} dimension must be in "
                              f"[1, {limit}], got {d}", hint)
    total = full[0] * full[1] * full[2]
    if total > MAX_THREADS:
        raise OptionError("block", f"block= {tuple(full)} has {total} threads, more than the "
                          f"{MAX_THREADS} a block may have", "make the block smaller (x*y*z <= 1024)")
    return full  # type: ignore[return-value]


def _check_int(option: str, v: Any, lo: int, hi: int, hint: str) -> int:
    if not _is_int(v) or not lo <= v <= hi:
        raise OptionError(option, f"{option}= must be an int in [{lo}, {hi}], got {_kind(v)}", hint)
    return int(v)


def check_shared_mem(v: Any) -> int | tuple[str, int]:
    """`shared_mem=`: bytes (an int >= 0) or ("max", n)."""
    hint = "give the dynamic shared memory in bytes (shared_mem=4096) or a maximum (shared_mem=(\"max\", 49152))"
    if isinstance(v, (tuple, list)):
        if len(v) != 2 or not (isinstance(v[0], str) and v[0] == "max"):
            raise OptionError("shared_mem", f"shared_mem= must be an int or (\"max\", n), got {v!r}", hint)
        return ("max", _check_int("shared_mem", v[1], 0, MAX_SHARED_MEM, hint))
    return _check_int("shared_mem", v, 0, MAX_SHARED_MEM, hint)


def check_min_cc(v: Any) -> int:
    hint = "give major*10 + minor of a real GPU, e.g. min_cc=80 (A100) or min_cc=90 (H100); 0 = any"
    if _is_int(v) and v == 0:
        return 0
    return _check_int("min_cc", v, MIN_CC, MAX_CC, hint)


def _check_bool(option: str, v: Any) -> bool:
    if not isinstance(v, bool):
        raise OptionError(option, f"{option}= must be True or False, got {_kind(v)}")
    return v


def check_lineinfo(v: Any) -> bool:
    """`lineinfo=`: True or False; None (the default) reads `KB_LINEINFO` (0/false/no/off turn line
    tables off, 1/true/yes/on or unset leave them on, anything else is a ConfigurationError). Resolved
    when the decorator is applied, so the value is part of the kernel's options and of its cache key."""
    if v is None:
        return env_switch("KB_LINEINFO", True)
    return _check_bool("lineinfo", v)


def _relations(v: Any, params: tuple[str, ...] | None) -> tuple[str, ...]:
    """`requires=`: relation texts that parse and name only parameters (or len/shape/size/ndim, or the
    launch terms grid.x|y|z / block.x|y|z). The native parser checks the rest when the contract is built."""
    import ast
    texts = (v,) if isinstance(v, str) else v
    if not isinstance(texts, (tuple, list)) or not all(isinstance(t, str) for t in texts):
        raise OptionError("requires", f"requires= must be a string or a list of strings, got {v!r}",
                          "write relations like requires=[\"len(a) == len(out)\"]")
    example = "write relations like \"len(a) == len(out)\" or \"a.shape == out.shape\""
    for text in texts:
        try:
            tree = ast.parse(text, mode="eval")
        except SyntaxError as exc:
            shown = repr(text) if len(text) <= 80 else repr(text[:60]) + f"... ({len(text)} characters)"
            raise OptionError("requires", f"requires=: cannot parse {shown} ({exc.msg})", example,
                              item=text) from None
        except (RecursionError, MemoryError, ValueError) as exc:
            raise OptionError("requires", f"requires=: relation {text[:60]!r}... ({len(text)} characters) "
                              f"cannot be parsed ({type(exc).__name__}: {exc})",
                              "split a long relation into several shorter ones", item=text) from None
        if params is None:
            continue
        launch = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr in ("x", "y", "z")
                  and isinstance(n.value, ast.Name) and n.value.id in _LAUNCH}
        for n in ast.walk(tree):
            if isinstance(n, ast.Name) and n.id in _LAUNCH and n.id not in params and id(n) not in launch:
                raise OptionError("requires", f"requires=: {text!r} names '{n.id}' alone",
                                  f"write {n.id}.x, {n.id}.y or {n.id}.z (the launch {n.id}'s extent on that axis)",
                                  item=text)
            if isinstance(n, ast.Name) and n.id not in params and n.id not in _TERMS and id(n) not in launch:
                raise OptionError("requires", f"requires=: {text!r} names '{n.id}', which is not a "
                                  "parameter", f"parameters are: {', '.join(params)}", item=text)
    return tuple(texts)


def _pairs(v: Any, params: tuple[str, ...] | None) -> tuple[tuple[str, str], ...]:
    hint = "list pairs of parameter names, e.g. inplace=[(\"a\", \"out\")]"
    if isinstance(v, str) or not isinstance(v, (tuple, list)):
        raise OptionError("inplace", f"inplace= must be a list of (name, name) pairs, got {v!r}", hint)
    out = []
    for pair in v:
        if isinstance(pair, str) or not isinstance(pair, (tuple, list)) or len(pair) != 2 or \
                not all(isinstance(n, str) for n in pair):
            raise OptionError("inplace", f"inplace=: {pair!r} is not a pair of parameter names", hint)
        if pair[0] == pair[1]:
            raise OptionError("inplace", f"inplace=: ({pair[0]!r}, {pair[1]!r}) pairs a parameter with "
                              "itself", "an in-place pair names two different parameters", item=pair[0])
        for name in pair:
            if params is not None and name not in params:
                raise OptionError("inplace", f"inplace=: '{name}' is not a parameter",
                                  f"parameters are: {', '.join(params)}", item=name)
        out.append((pair[0], pair[1]))
    return tuple(out)


def check_relations(params: tuple[str, ...], requires: Any, inplace: Any) -> None:
    """`requires=` and `inplace=` against the parameter names (raises OptionError)."""
    _relations(requires, params)
    _pairs(inplace, params)


def check_requires(requires: Any, params: tuple[str, ...] | None) -> tuple[str, ...]:
    """`requires=` of a kernel of either model: the relation texts, each parsed and naming only
    `params` (None: names unchecked); raises OptionError."""
    return _relations(requires, params)


def simt_options(params: tuple[str, ...] | None, *, block: Any = None, launch_bounds: Any = None,
                 domain: Any = 1, shared_mem: Any = 0, min_cc: Any = 0, requires: Any = (),
                 inplace: Any = (), boundscheck: Any = True, fastmath: Any = False, ftz: Any = False,
                 grid_from: Any = None, lineinfo: Any = None, pdl: Any = False, cooperative: Any = False,
                 cluster: Any = None, cluster_nonportable: Any = False) -> KernelOptions:
    """Checked KernelOptions of a @simt.kernel (`params`: the parameter names, None when unknown).
    Raises OptionError; whether `grid_from` names an array of enough axes is checked by the caller,
    which can read the annotations."""
    if not _is_int(domain) or domain not in (1, 2, 3):
        raise OptionError("domain", f"domain= must be 1, 2 or 3, got {_kind(domain)}",
                          "domain is the number of grid dimensions the kernel uses")
    dims = check_block(block)
    bounds = None
    if launch_bounds is not None:
        bounds = _check_int("launch_bounds", launch_bounds, 1, MAX_THREADS,
                            "launch_bounds= is the most threads a block may have, e.g. 256")
    if dims is not None and bounds is not None:
        raise OptionError("launch_bounds", "give block= (exact) or launch_bounds= (maximum), not both",
                          "remove one of them")
    if grid_from is not None and not isinstance(grid_from, str):
        raise OptionError("grid_from", f"grid_from= must be a parameter name, got {_kind(grid_from)}",
                          "name the array the kernel's threads range over, e.g. grid_from=\"data\"")
    if grid_from is not None and params is not None and grid_from not in params:
        raise OptionError("grid_from", f"grid_from=: '{grid_from}' is not a parameter",
                          f"parameters are: {', '.join(params)}")
    launch = check_launch_features(pdl, cooperative, cluster, cluster_nonportable)
    return KernelOptions(block=dims, launch_bounds=bounds, domain=int(domain),
                         shared_mem=check_shared_mem(shared_mem), min_cc=check_min_cc(min_cc),
                         requires=_relations(requires, params), inplace=_pairs(inplace, params),
                         boundscheck=_check_bool("boundscheck", boundscheck),
                         fastmath=_check_bool("fastmath", fastmath), ftz=_check_bool("ftz", ftz),
                         grid_from=grid_from,
                         lineinfo=check_lineinfo(lineinfo), pdl=launch.pdl, cooperative=launch.cooperative,
                         cluster=launch.cluster, cluster_nonportable=launch.cluster_nonportable)


MAX_CLUSTER, MAX_CLUSTER_NONPORTABLE = 8, 16     # blocks per cluster: portable / sm_90's opt-in


@dataclass(frozen=True)
class LaunchFeatures:
    """The launch-feature options of a kernel of either model, checked (check_launch_features)."""
    pdl: bool = False
    cooperative: bool = False
    cluster: tuple[int, int, int] | None = None
    cluster_nonportable: bool = False

    def contract_kwargs(self) -> dict[str, Any]:
        """The LaunchContract keywords / contract JSON keys that are set (none for a plain kernel)."""
        out: dict[str, Any] = {k: True for k in ("pdl", "cooperative", "cluster_nonportable") if getattr(self, k)}
        if self.cluster is not None:
            out["cluster"] = self.cluster
        return out


def check_cluster(cluster: Any, nonportable: Any) -> tuple[int, int, int] | None:
    """`cluster=`: None, an int or 1 to 3 ints >= 1 with at most 8 blocks in all (16 with
    `cluster_nonportable=True`, sm_90's opt-in sizes)."""
    nonportable = _check_bool("cluster_nonportable", nonportable)
    if cluster is None:
        if nonportable:
            raise OptionError("cluster_nonportable", "cluster_nonportable=True needs a cluster=",
                              "declare the cluster, e.g. cluster=(16, 1, 1), cluster_nonportable=True")
        return None
    hint = "give the cluster as an int or 1 to 3 ints, e.g. cluster=2 or cluster=(2, 1, 1)"
    dims = (cluster,) if not isinstance(cluster, (tuple, list)) else tuple(cluster)
    if not 1 <= len(dims) <= 3 or not all(_is_int(d) for d in dims):
        raise OptionError("cluster", f"cluster= must be an int or a tuple of 1 to 3 ints, got {_kind(cluster)}", hint)
    full = tuple(int(d) for d in dims) + (1,) * (3 - len(dims))
    if min(full) < 1:
        raise OptionError("cluster", f"cluster= {full}: every dimension must be >= 1", hint)
    most = MAX_CLUSTER_NONPORTABLE if nonportable else MAX_CLUSTER
    size = full[0] * full[1] * full[2]
    if size > most:
        more = "" if nonportable else "; cluster_nonportable=True allows up to 16 on sm_90"
        raise OptionError("cluster", f"cluster= {full} has {size} blocks, more than the {most} a cluster may "
                          f"have{more}", "make the cluster smaller")
    return full  # type: ignore[return-value]


def check_launch_features(pdl: Any = False, cooperative: Any = False, cluster: Any = None,
                          cluster_nonportable: Any = False) -> LaunchFeatures:
    """`pdl=`, `cooperative=`, `cluster=`, `cluster_nonportable=` of either decorator (OptionError)."""
    return LaunchFeatures(_check_bool("pdl", pdl), _check_bool("cooperative", cooperative),
                          check_cluster(cluster, cluster_nonportable), bool(cluster_nonportable))


def check_group_m(group_m: Any) -> int | None:
    """`@tile.kernel(group_m=)`: None, or tile rows per group of the block order, an int in [1, 256]."""
    if group_m is not None and (not _is_int(group_m) or not 1 <= group_m <= 256):
        raise OptionError("group_m", f"group_m= must be an int in [1, 256] (tile rows per group of the "
                          f"block order), got {_kind(group_m)}",
                          "group_m=8 groups 8 tile rows (Triton's GROUP_SIZE_M); group_m=1 is row-major")
    return group_m


def check_tile_options(num_warps: Any, persistent: Any) -> tuple[int | None, bool]:
    """`@tile.kernel(num_warps=, persistent=)`: num_warps a power of two in [1, 32] (None = chosen
    per kernel), persistent a bool."""
    if num_warps is not None and (not _is_int(num_warps) or not 1 <= num_warps <= 32 or
                                  num_warps & (num_warps - 1)):
        raise OptionError("num_warps", f"num_warps= must be a power of two in [1, 32], got {_kind(num_warps)}",
                          "e.g. num_warps=4 (128 threads per tile block), or leave it out")
    return (int(num_warps) if num_warps is not None else None), _check_bool("persistent", persistent)


def check_symbol_names(pyfunc: Any) -> None:
    """A kernel's name becomes its PTX entry symbol and its parameter names go into the launch
    contract: both must be ASCII identifiers (LLVM aborts the process on a non-ASCII symbol)."""
    code = getattr(pyfunc, "__code__", None)
    if code is None:
        return
    hint = "kernel and parameter names become PTX symbols and contract names: use ASCII letters, digits and _"
    if not code.co_name.isascii():
        raise OptionError("", f"the kernel name {code.co_name!r} is not ASCII", hint, item=code.co_name)
    for name in code.co_varnames[:code.co_argcount]:
        if not name.isascii():
            raise OptionError("", f"parameter name {name!r} is not ASCII", hint, item=name)


def check_export(export: Any) -> str | None:
    """`@simt.device(export=)`: a C identifier (it becomes a PTX symbol)."""
    import re
    if export is None:
        return None
    if not isinstance(export, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", export):
        raise OptionError("export", f"export= must be a C identifier, got {_kind(export)}",
                          "e.g. export=\"dsl_scale\" (letters, digits and _, not starting with a digit)")
    return export
