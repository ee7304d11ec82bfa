"""Ownership of DisjointSlice elements: every safe write is owned by exactly one thread of the launch.

A safe write (outside `with simt.unsafe():`) to a DisjointSlice names its element in one of these forms:
- at the kernel's ThreadIndex (`out[i] = ...`, `out.get_mut(i).set(...)`): the thread whose global
  index is i owns element i;
- at the position a `simt.thread.chunk_1d(n)` loop gives (`for q in chunk: out[q] = ...`): thread t
  owns elements [t*n, t*n + n). A chunk of 1 is the ThreadIndex form. `chunk_2d` / `chunk_3d` give the
  same run along the last axis of the row the thread's other index components name
  (`b, t, ch = simt.thread.chunk_3d(4)`, `for c in ch: out[b, t, c] = ...`).
- a warp a row (`w = simt.warp.index_1d()`, `for c in simt.warp.lanes(n): out[w, c] = ...`): warp w
  owns row w of a 2-D slice and its lane l writes columns l, l + 32, ...; at the warp's index itself
  (`mean[w] = m`, 1-D) the warp writes once, from lane 0. Warps are whole (an exact block of whole warps
  along x), so the global warp number names one warp of the launch;
- a block a row (`b = simt.block.index_1d()`, `for c in simt.block.threads(n): out[b, c] = ...`): the
  same with block b and its thread t writing columns t, t + blockDim.x, ...; `sums[b] = s` from thread 0;
- rows strided over the launch (`for r in simt.warp.rows(n)`: r = the warp's index, + the launch's
  warps, ...; `simt.block.rows(n)`, `g.rows(n)` alike): row r has one owning group for any grid, as
  the C++ "warps stride over the rows" loop. A form of its own: with the index form on one slice, row
  w + W would have two owners.
Each form alone gives every element one owner, for the whole launch (the contract's `strict_domain`
keeps the launch from repeating threads along the axes past the domain). Two forms on one slice do
not: with `out[i]` and a `chunk_1d(4)` loop, thread 1 and thread 0 both own out[1]. So the front end
records a claim for every safe write (device functions' claims are mapped onto the caller's
arguments) and refuses a kernel whose claims on one slice disagree, or whose ThreadIndex does not
span the kernel's domain, with a caret at the second write naming the first.
"""
from __future__ import annotations

from dataclasses import dataclass

from dsl.source import compile_error
from dsl.ir import nodes as ir


@dataclass(frozen=True)
class Form:
    """How a write names its element: at an `ndim`-D ThreadIndex (per == 1) or in a chunk of `per`
    (scope "thread"), or by a warp's / block's index (scope "warp" / "block": a row of a 2-D slice
    strided over its lanes, or one element of a 1-D slice written by its first lane)."""
    ndim: int
    per: int
    scope: str = "thread"
    rows: bool = False        # the rows of a `rows(n)` loop (the group's index, + the launch's groups)

    def text(self, array: str) -> str:
        if self.scope != "thread":
            width = ir.scope_width(self.scope)
            g = "block" if width is None else "warp" if width == 32 else f"group of {width} lanes"
            k = "b" if width is None else "w" if width == 32 else "g"
            first, step = ("thread 0", "blockDim.x") if width is None else ("lane 0", str(width))
            if self.rows:
                return (f"in a {g}s' rows(n) loop ({g} {k} owns rows {k}, {k} + the launch's {g}s, ..., "
                        f"written by its {'threads' if width is None else 'lanes'})")
            if self.ndim == 1:
                return f"at its {g}'s index ({g} {k}'s {first} writes {array}[{k}])"
            return (f"a {g} a row ({g} {k} owns {array}[{k}, :]; its {'thread' if width is None else 'lane'} "
                    f"r writes columns r, r + {step}, ...)")
        if self.per == 1:
            return f"at its {self.ndim}-D ThreadIndex (thread i owns {array}[i])"
        if self.ndim == 1:
            return f"in a chunk_1d({self.per}) loop (thread t owns {array}[{self.per}*t : {self.per}*t + {self.per}])"
        row = "b, t" if self.ndim == 3 else "r"
        return (f"in a chunk_{self.ndim}d({self.per}) loop (thread ({row}, x) owns {array}[{row}, "
                f"{self.per}*x : {self.per}*x + {self.per}])")


def thread_form(ndim: int) -> Form:
    return Form(ndim, 1)


def chunk_form(n: int, ndim: int = 1) -> Form:
    return Form(ndim, n)     # chunk_Nd(1) is the N-D ThreadIndex form


def group_form(scope: str, ndim: int, rows: bool = False) -> Form:
    """A row of a 2-D slice (ndim 2) or one element of a 1-D slice (ndim 1) owned by a warp / block
    (by its index, or with `rows` in a rows(n) loop: two forms, their owners differ)."""
    return Form(ndim, 1, scope, rows)


def check_owner_options(scope: str, options, loc: ir.Loc) -> None:
    """Warp, lane-group and block indices own rows of a 1-D launch; a warp (group) index also needs an
    exact block of whole warps along x, so that (x-thread // 32) names one hardware warp and the derived
    grid is known."""
    width = ir.scope_width(scope)
    name = "simt.block.index_1d()" if width is None else "simt.warp.index_1d()" if width == 32 else \
        f"simt.warp.group({width}).index_1d()"
    if options.domain != 1:
        raise compile_error(f"{name} in a kernel declared with domain={options.domain}: warps and blocks "
                            "own rows of a 1-D launch", loc, "declare @simt.kernel(domain=1, ...)")
    if width is not None:
        b = options.block
        if b is None or b[0] % 32 or b[1] != 1 or b[2] != 1:
            got = "no exact block" if b is None else f"block={b}"
            raise compile_error(f"{name} needs an exact 1-D block of whole warps (a multiple of 32 "
                                f"threads), got {got}", loc,
                                "declare e.g. @simt.kernel(block=256) (8 warps, each owning a row)")


@dataclass(frozen=True)
class Claim:
    """One safe write of parameter `param` (its position in the function that wrote it) in `form`,
    at `loc` (a Span: the caret covers the written target); `via` names the device-function calls
    that led there, outermost first."""
    param: int
    form: Form
    loc: ir.Loc
    via: tuple[str, ...] = ()

    def where(self) -> str:
        text = self.loc.text.strip()
        place = f"line {self.loc.line}" + (f" (`{text}`)" if text else "")
        return place + "".join(f" in {v}" for v in reversed(self.via))


def mapped(claims: list[Claim], args: list[ir.Expr], callee: str, call_loc: ir.Loc) -> list[Claim]:
    """The callee's claims as claims on the caller's own parameters (arrays reach a device function
    only as parameters, so every writable argument is a ParamRef of the caller)."""
    out = []
    for c in claims:
        a = args[c.param] if c.param < len(args) else None
        if isinstance(a, ir.ParamRef):
            out.append(Claim(a.param.index, c.form, c.loc,
                             (f"device function '{callee}' called at line {call_loc.line}",) + c.via))
    return out


def check_claims(params: list[str], claims: list[Claim], options) -> None:
    """Every DisjointSlice of the kernel is claimed in one form, and that form spans the domain."""
    domain = options.domain
    first: dict[int, Claim] = {}
    for c in claims:
        name = params[c.param]
        if c.form.scope != "thread":       # also for the claims of device functions
            check_owner_options(c.form.scope, options, c.loc)
        if c.form.scope == "thread" and c.form.per == 1 and c.form.ndim != domain:
            raise compile_error(
                f"'{name}' is written at a {c.form.ndim}-D ThreadIndex in a kernel of domain={domain} "
                f"({c.where()}): threads that differ only along the other axes would own the same element",
                c.loc,
                f"use simt.thread.index_{domain}d() (the kernel's domain) for every safe write, or declare "
                f"@simt.kernel(domain={c.form.ndim}, ...)")
        if c.form.per > 1 and domain != c.form.ndim:
            nd = c.form.ndim
            raise compile_error(
                f"'{name}' is written in a chunk_{nd}d({c.form.per}) loop in a kernel of domain={domain} "
                f"({c.where()}): threads that differ along the other axes would own the same elements",
                c.loc, f"chunk_{nd}d loops need @simt.kernel(domain={nd})")
        prev = first.setdefault(c.param, c)
        if prev.form != c.form:
            raise compile_error(
                f"DisjointSlice '{name}' is written in two ownership forms, so two threads may write one "
                f"element (a data race): {prev.where()} writes it {prev.form.text(name)}, and {c.where()} "
                f"writes it {c.form.text(name)}; {_example(name, prev.form, c.form)}", c.loc,
                f"write '{name}' in one form in the whole kernel (every write at the ThreadIndex, or "
                "every write in chunk loops of one size), or wrap the writes you vouch for in "
                "`with simt.unsafe():`")


def _example(name: str, a: Form, b: Form) -> str:
    """Two threads that own one element under forms `a` and `b` (1-D forms; n-D forms differ in ndim
    only when the domain check above has already refused one)."""
    if a.scope != b.scope or a.scope != "thread":
        return "the two forms give its elements different owners, so two threads would write one element"
    e = min(a.per, b.per)        # e // min == 1, e // max == 0
    row = ", ".join(["0"] * (a.ndim - 1) + [str(e)])
    return f"thread {e // a.per} and thread {e // b.per} would both write {name}[{row}]"
