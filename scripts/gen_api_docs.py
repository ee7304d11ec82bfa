"""Write docs/api.md, the API reference, from the docstrings of the public API (and docs/tile.md's
table of tile ops, between `<!-- api:tile-ops -->` lines, from the tile-op table dsl/tile/tileops.py).

    python scripts/gen_api_docs.py            # rewrite docs/api.md and docs/tile.md's table
    python scripts/gen_api_docs.py --check    # exit 1 when either is not what this would write

Public API = each module's `__all__` (bridge, bridge.testing, dsl, dsl.simt, dsl.tile) and the public
functions of the integrations `dsl.torch` / `dsl.jax` (documented without importing torch or jax:
those modules import them only when called). interop_tests/package/test_api_reference.py regenerates
the page and compares, so a docstring change without a regenerated page fails the tests.

The output depends only on the sources: signatures are written from the parameters (annotation text,
default reprs with memory addresses removed), never from a machine's state.
"""
from __future__ import annotations

import argparse
import importlib
import inspect
import re
import sys
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "api.md"
TILE_MD = ROOT / "docs" / "tile.md"
_TILE_OPS_BLOCK = re.compile(r"(<!-- api:tile-ops -->\n)(.*?)(<!-- /api:tile-ops -->)", re.S)

# (name users write, module that implements it, one line on what it is for)
MODULES: tuple[tuple[str, str, str], ...] = (
    ("bridge", "bridge", "the runtime: arrays, streams, modules, kernels, contracts, errors"),
    ("bridge.testing", "bridge.testing", "generated launches and differential checks from contracts"),
    ("dsl", "dsl", "the kernel DSL: scalar types, errors, the two kernel models"),
    ("dsl.simt", "dsl.simt", "per-thread kernels (docs/dsl.md)"),
    ("dsl.tile", "dsl.tile", "per-tile kernels (docs/tile.md)"),
    ("dsl.torch", "dsl.integrations.torch_op", "kernels as torch custom ops (docs/integrations.md)"),
    ("dsl.jax", "dsl.integrations.jax_call", "kernels inside jax.jit (docs/integrations.md)"),
)
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def _doc(obj: Any) -> str:
    return inspect.cleandoc(obj.__doc__) if isinstance(getattr(obj, "__doc__", None), str) else ""


def _own_doc(obj: Any) -> str:
    """The object's docstring when it is its own (not only its class's)."""
    doc = _doc(obj)
    if inspect.isclass(obj) or inspect.isroutine(obj) or inspect.ismodule(obj):
        return doc
    return "" if doc == _doc(type(obj)) else doc


def _annotation(ann: Any) -> str:
    if ann is inspect.Parameter.empty:
        return ""
    if isinstance(ann, str):
        return ann[1:-1] if len(ann) > 1 and ann[0] == ann[-1] and ann[0] in "'\"" else ann
    return inspect.formatannotation(ann)


def signature(fn: Callable) -> str | None:
    """`(a: int, *, b: str = 'x') -> bool` from the parameters, or None when Python cannot tell
    (native functions without a text signature)."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    params = list(sig.parameters.values())
    parts: list[str] = []
    for i, p in enumerate(params):
        if p.kind is p.KEYWORD_ONLY and not any(q.kind in (p.KEYWORD_ONLY, p.VAR_POSITIONAL) for q in params[:i]):
            parts.append("*")
        text = {p.VAR_POSITIONAL: "*", p.VAR_KEYWORD: "**"}.get(p.kind, "") + p.name
        ann = _annotation(p.annotation)
        if ann:
            text += f": {ann}"
        if p.default is not p.empty:
            text += (" = " if ann else "=") + _ADDRESS.sub("", repr(p.default))
        parts.append(text)
        if p.kind is p.POSITIONAL_ONLY and (i + 1 == len(params) or params[i + 1].kind is not p.POSITIONAL_ONLY):
            parts.append("/")
    ret = _annotation(sig.return_annotation)
    return f"({', '.join(parts)})" + (f" -> {ret}" if ret else "")


def _members(cls: type) -> list[tuple[str, Any]]:
    """Public methods and properties defined in Python by `cls` or its project base classes."""
    seen: dict[str, Any] = {}
    for klass in cls.__mro__:
        if klass is object or klass.__module__.split(".")[0] not in ("bridge", "dsl"):
            continue
        for name, value in vars(klass).items():
            if name.startswith("_") and name not in ("__call__", "__getitem__"):
                continue
            if name in seen:
                continue
            if isinstance(value, (staticmethod, classmethod)) or inspect.isfunction(value) \
                    or isinstance(value, property):
                seen[name] = value
    return sorted(seen.items())


def _entry_routine(qual: str, fn: Callable, level: str) -> list[str]:
    sig = signature(fn)
    lines = [f"{level} `{qual}{sig if sig is not None else '(...)'}`", ""]
    doc = _doc(fn)
    return lines + ([doc, ""] if doc else [])


def _entry_class(qual: str, cls: type) -> list[str]:
    bases = [b.__name__ for b in cls.__bases__ if b is not object]
    lines = [f"### class `{qual}`" + (f" ({', '.join(bases)})" if bases else ""), ""]
    doc = _doc(cls)
    if doc:
        lines += [doc, ""]
    for name, member in _members(cls):
        if isinstance(member, property):
            pdoc = _doc(member)         # pybind11 puts its generated signature on fget, not here
            lines += [f"- property `{name}`" + (f": {pdoc}" if pdoc else ""), ""]
        else:
            kind = "classmethod " if isinstance(member, classmethod) else \
                "staticmethod " if isinstance(member, staticmethod) else ""
            fn = member.__func__ if kind else member
            # a classmethod's signature without `cls`, as callers write it
            sig = signature(getattr(cls, name) if kind == "classmethod " else fn) or "(...)"
            mdoc = _doc(fn)
            lines += [f"- {kind}`{name}{sig}`" + ("\n\n  " + mdoc.replace("\n", "\n  ") if mdoc else ""), ""]
    return lines


def _entry_module(qual: str, mod: Any) -> list[str]:
    lines = [f"### module `{qual}`", ""]
    doc = _doc(mod)
    if doc:
        lines += [doc, ""]
    names = getattr(mod, "__all__", None) or sorted(
        n for n, v in vars(mod).items() if not n.startswith("_") and (inspect.isfunction(v) or inspect.isclass(v))
        and getattr(v, "__module__", None) == mod.__name__)
    for name in names:
        value = getattr(mod, name)
        first = _own_doc(value).split("\n\n", 1)[0].replace("\n", " ")
        sig = signature(value) if inspect.isfunction(value) else None
        lines.append(f"- `{name}{sig or ''}`" + (f": {first}" if first else ""))
    return lines + [""]


def _public_names(mod: Any) -> list[str]:
    if hasattr(mod, "__all__"):
        return list(mod.__all__)
    return sorted(n for n, v in vars(mod).items()
                  if not n.startswith("_") and inspect.isfunction(v) and v.__module__ == mod.__name__)


def module_section(public: str, impl: str, blurb: str, documented: dict[int, str]) -> list[str]:
    mod = importlib.import_module(impl)
    lines = [f"## `{public}` — {blurb}", ""]
    doc = _doc(mod)
    if doc:
        lines += [doc, ""]
    sections = {impl_name: pub for pub, impl_name, _b in MODULES}
    grouped: dict[type, list[str]] = {}
    for name in _public_names(mod):
        value = getattr(mod, name)
        qual = f"{public}.{name}"
        if inspect.ismodule(value) and value.__name__ in sections and sections[value.__name__] != public:
            target = sections[value.__name__]
            lines += [f"- `{qual}`: see [`{target}`](#{target.replace('.', '')}) below", ""]
            continue
        if id(value) in documented and not isinstance(value, (int, float, str)):
            lines += [f"- `{qual}`: the same object as `{documented[id(value)]}`", ""]
            continue
        documented.setdefault(id(value), qual)
        if inspect.ismodule(value):
            lines += _entry_module(qual, value)
        elif inspect.isclass(value):
            lines += _entry_class(qual, value)
        elif inspect.isroutine(value):
            lines += _entry_routine(qual, value, "###")
        else:
            grouped.setdefault(type(value), []).append(name)
    for kind, names in grouped.items():
        lines += _entry_values(public, mod, kind, names)
    return lines


def _entry_values(public: str, mod: Any, kind: type, names: list[str]) -> list[str]:
    """Objects that are neither classes nor functions (intrinsics, dtypes, namespaces), one block per
    type: the type's docstring, then each object's own docstring or, for a namespace, its members."""
    lines = [f"### {kind.__name__}: " + ", ".join(f"`{public}.{n}`" for n in names), ""]
    # a builtin type's docstring (float, tuple) says nothing about the API and changes between Pythons
    doc = _doc(kind) if kind.__module__.split(".")[0] in ("bridge", "dsl") else ""
    if doc:
        lines += [doc, ""]
    for n in names:
        value = getattr(mod, n)
        own = _own_doc(value)
        members = [a for a in getattr(value, "__dict__", {}) if not a.startswith("_")]
        if own:
            lines.append(f"- `{public}.{n}`: " + own.replace("\n", " "))
        elif members and all(callable(getattr(value, a)) for a in members):
            lines.append(f"- `{public}.{n}`: " + ", ".join(f"`{a}`" for a in members))
    return lines + [""]


def render() -> str:
    lines = ["# API reference", "",
             "Generated by `python scripts/gen_api_docs.py` from the docstrings of the public API (each",
             "module's `__all__`); do not edit by hand. The guides are [dsl.md](dsl.md), [tile.md](tile.md),",
             "[cpp.md](cpp.md), [integrations.md](integrations.md), [porting.md](porting.md) and",
             "[configuration.md](configuration.md).", ""]
    lines += [f"- [`{public}`](#{public.replace('.', '')}) — {blurb}" for public, _impl, blurb in MODULES] + [""]
    documented: dict[int, str] = {}
    for public, impl, blurb in MODULES:
        lines += module_section(public, impl, blurb, documented)
    text = "\n".join(line.rstrip() for line in lines)
    return re.sub(r"\n{3,}", "\n\n", text).rstrip("\n") + "\n"


def tile_ops_table() -> str:
    """The Markdown table of docs/tile.md: one line per row of the tile-op table."""
    from dsl.tile import tileops
    lines = ["| function | method | what it computes |", "| --- | --- | --- |"]
    for row in tileops.TILE_OPS:
        method = f"`{row.method_signature()}`" if row.method else "—"
        doc = row.doc.replace("|", r"\|")
        lines.append(f"| `tile.{row.signature()}` | {method} | {doc} |")
    return "\n".join(lines)


def sync_tile_md(text: str) -> str:
    """`text` (docs/tile.md) with its tile-op table regenerated."""
    return _TILE_OPS_BLOCK.sub(lambda m: m.group(1) + tile_ops_table() + "\n" + m.group(3), text)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="only compare: exit 1 when docs/api.md is stale")
    ap.add_argument("--output", type=Path, default=OUT,
                    help="where to write the API page (default docs/api.md; another path leaves "
                         "docs/tile.md alone)")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    pages = {args.output: render()}
    if args.output.resolve() == OUT.resolve():
        pages[TILE_MD] = sync_tile_md(TILE_MD.read_text(encoding="utf-8"))
    for path, text in pages.items():
        current = path.read_text(encoding="utf-8") if path.exists() else ""
        if args.check and current != text:
            print(f"{path} is stale: run python scripts/gen_api_docs.py", file=sys.stderr)
            return 1
        if not args.check and current != text:
            path.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
