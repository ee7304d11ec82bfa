"""Line tables: LLVM debug metadata that the NVPTX back end turns into PTX `.file` / `.loc` directives.

What is emitted is what `nvcc -lineinfo` gives a profiler or sanitizer, nothing more: one
DICompileUnit with `emissionKind: DebugDirectivesOnly` (NVPTX then writes `.loc` + `.file` and no
DWARF sections — `LineTablesOnly` would add `.debug_info`/`.debug_abbrev` and `.target ..., debug`),
one DIFile per source file, one DISubprogram per emitted function and one DILocation per IR statement,
plus the module flags "Debug Info Version" 3 and "Dwarf Version" 2 (NVPTX's DWARF). No
`llvm.dbg.*` intrinsics are emitted, so the optimiser and the code it produces do not change: only
the line table does (checked against `cuobjdump -sass` in interop_tests/dsl_codegen).

ptxas rejects `\\"` inside a `.file` string, so a `"` in a path becomes `_`; bytes of a path that are
not UTF-8 (surrogate escapes) become U+FFFD. DILocation columns are 16-bit in LLVM: a larger column is
given as 0 ("unknown column").
"""
from __future__ import annotations

import os

import llvmlite.ir as ir

from dsl.ir import nodes as N

PRODUCER = "kernelbridge DSL"
_MAX_COLUMN = 0xFFFF
_MAX_LINE = 0xFFFFFFFF


def _ptx_path(path: str) -> str:
    """`path` as a string NVPTX can print and ptxas can parse (see the module docstring)."""
    try:
        raw = os.fsencode(path)
    except (TypeError, ValueError):      # not a str/bytes path (a hand-built Loc)
        raw = str(path).encode("utf-8", "replace")
    return raw.decode("utf-8", "replace").replace('"', "_")


def _clamp(v: object, hi: int) -> int:
    try:
        n = int(v)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return 0
    return n if 0 <= n <= hi else 0


class LineTables:
    """The line-table metadata of one LLVM module. Metadata nodes are interned by llvmlite
    (`Module.add_debug_info` returns the existing node for equal operands), so asking for the same
    file or location twice is cheap and yields one node."""

    def __init__(self, module: ir.Module, main_file: str) -> None:
        self.module = module
        self._files: dict[str, ir.DIValue] = {}
        self.cu = module.add_debug_info("DICompileUnit", {
            "language": ir.DIToken("DW_LANG_Python"),
            "file": self.file(main_file),
            "producer": PRODUCER,
            "isOptimized": True,
            "runtimeVersion": 0,
            "emissionKind": ir.DIToken("DebugDirectivesOnly"),
        }, is_distinct=True)
        module.add_named_metadata("llvm.dbg.cu", self.cu)
        flags = module.add_named_metadata("llvm.module.flags")
        i32 = ir.IntType(32)
        # behaviours: 2 = Warning (the usual for "Debug Info Version"), 7 = Max
        for behaviour, key, value in ((2, "Debug Info Version", 3), (7, "Dwarf Version", 2)):
            flags.add(module.add_metadata([ir.Constant(i32, behaviour), ir.MetaDataString(module, key),
                                           ir.Constant(i32, value)]))
        self._no_types = module.add_debug_info("DISubroutineType", {"types": module.add_metadata([])})

    def file(self, path: str) -> ir.DIValue:
        got = self._files.get(path)
        if got is None:
            # the whole path as the file name (no directory): NVPTX prints it as given, on any OS
            got = self._files[path] = self.module.add_debug_info(
                "DIFile", {"filename": _ptx_path(path), "directory": ""})
        return got

    def subprogram(self, fn: N.Function, llfn: ir.Function) -> ir.DIValue | None:
        """The DISubprogram of `fn`, attached to `llfn`; None when `fn` has no source location
        (hand-built IR): such a function gets no line table."""
        loc = fn.loc
        if loc is N.NOLOC or not loc.file or loc.line <= 0:
            return None
        line = _clamp(loc.line, _MAX_LINE)
        sp = self.module.add_debug_info("DISubprogram", {
            "name": fn.name,
            "file": self.file(loc.file),
            "scope": self.file(loc.file),
            "line": line,
            "scopeLine": line,
            "type": self._no_types,
            "unit": self.cu,
            "spFlags": ir.DIToken("DISPFlagDefinition | DISPFlagOptimized"),
        }, is_distinct=True)
        llfn.set_metadata("dbg", sp)
        return sp

    def location(self, loc: N.Loc, scope: ir.DIValue, scope_file: str) -> ir.DIValue:
        """The DILocation of `loc` inside `scope` (a statement from another file than its function —
        IR put together by hand or by a lowering — gets a DILexicalBlockFile scope)."""
        if loc.file != scope_file:
            scope = self.module.add_debug_info("DILexicalBlockFile", {
                "scope": scope, "file": self.file(loc.file), "discriminator": 0})
        return self.module.add_debug_info("DILocation", {
            "line": _clamp(loc.line, _MAX_LINE), "column": _clamp(loc.col, _MAX_COLUMN), "scope": scope})
