"""The DSL's error tree: one root, `DslError`, with a branch per kind of failure, as bridge/errors.py
is for the runtime. Why one root: a caller can catch every DSL failure with one `except`, and a
branch (`DslTargetError`, ...) without listing leaf classes spread over the package. The leaves stay
in the modules that raise them and keep their usual Python base too (`TargetError` is a ValueError,
`PtxasNotFound` a FileNotFoundError), so existing `except ValueError` code still catches them.
The runtime's own errors (`bridge.KernelFault`, launch-contract errors) are not DslErrors: `bridge`
never imports `dsl`. This module imports nothing of the DSL, so any module may import it.

Compile errors point at the user's source: file:line:col, the source line, a caret under the
offending construct, and a hint saying what to write instead (`DslCompileError`)."""
from __future__ import annotations


class DslError(Exception):
    """Any error the DSL defines: `except dsl.DslError` catches every one of them (docs/dsl.md,
    "The error tree"). Runtime errors (`bridge.*`, `dsl.KernelFault`) are not DslErrors."""


class DslCompileStageError(DslError):
    """A stage of the compiler could not turn a kernel into PTX: the user's source is refused
    (`DslCompileError`, located), or the type rules, the IR verifier, a lowering or the code
    generator found something it cannot handle."""


class DslTargetError(DslError):
    """The target GPU or its toolchain: an unknown or unsupported arch, ptxas or libdevice not
    found, ptxas refusing the PTX."""


class DslLinkError(DslError):
    """Linking device code (nvJitLink or nvcc) failed."""


class DslCacheError(DslError):
    """The DSL's disk cache will not use a folder (not its own, or writable by others)."""


class DslDeclarationError(DslError):
    """Something declared to the DSL is malformed: a decorator option, the stage names of a compile
    call, a row of the math or tile-op table (the kernel's body is a compile error instead)."""


class DslToolError(DslError):
    """A DSL command (`python -m dsl compile|port|cache|...`, `python -m dsl.aot`) cannot do what was
    asked: a usage mistake, a missing input or tool, a module that cannot be ported or built."""


class DslSimulationError(DslError):
    """The CPU simulator met behaviour that is undefined on the GPU. (Out-of-bounds accesses are
    `KernelFault`s, on the GPU and in the simulator alike: a runtime error, not a DslError.)"""


class DslCompileError(DslCompileStageError):
    """A kernel or device function cannot be compiled; the message says where and what to do instead."""

    def __init__(self, message: str, *, file: str = "<unknown>", line: int = 0, col: int = 0,
                 source_line: str = "", end_col: int | None = None, hint: str = "") -> None:
        self.message, self.file, self.line, self.col = message, file, line, col
        self.source_line, self.hint = source_line, hint
        self.end_col = end_col if end_col is not None and end_col > col else col + 1
        super().__init__(self.render())

    @property
    def caret_line(self) -> str:
        """`^~~~` under the construct (columns are 1-based; tabs are kept so the caret aligns)."""
        if not self.source_line or self.col <= 0:
            return ""
        prefix = "".join(c if c == "\t" else " " for c in self.source_line[: self.col - 1])
        width = max(1, min(self.end_col, len(self.source_line) + 1) - self.col)
        return prefix + "^" + "~" * (width - 1)

    def render(self) -> str:
        lines = [f"{self.file}:{self.line}:{self.col}: error: {self.message}"]
        if self.source_line:
            lines += ["    " + self.source_line, "    " + self.caret_line]
        if self.hint:
            lines.append(f"hint: {self.hint}")
        return "\n".join(lines)
