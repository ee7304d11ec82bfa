"""`kernel.inspect(...)` for both kernel models: what ptxas says about the compiled PTX, the contract,
and the SASS when the disassembler is installed.

The answer is a `KernelInfo`: attributes for programs, `str(info)` for people (a short report), and
`info["key"]` for the dict keys `inspect()` used to return (`"contract"` is the JSON text there,
`"contract_dict"` the dict), so code written against the old dict keeps working.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from dsl.perf import SlowPath, from_metadata, from_resources, unique

# old dict key -> attribute (inspect() returned a dict whose "contract" was the JSON text)
_LEGACY_KEYS = {"kernel": "kernel", "symbol": "symbol", "arch": "arch", "resources": "resources",
                "ptxas_log": "ptxas_log", "contract": "contract_json", "contract_dict": "contract",
                "sass": "sass", "metadata": "metadata"}

# resource fields shown by __str__, in this order (the names ptxas -v reports, see dsl/backend/ptxas.py)
_RESOURCE_LINES = (("registers", "registers", ""), ("spill_stores", "spill stores", " bytes"),
                   ("spill_loads", "spill loads", " bytes"), ("stack_frame", "stack frame", " bytes"),
                   ("shared_bytes", "static shared memory", " bytes"), ("const_bytes", "constant bank 0", " bytes"),
                   ("barriers", "barriers", ""))


@dataclass(frozen=True)
class KernelInfo:
    """What `kernel.inspect(*args, arch=...)` found for one specialisation.

    `resources` is ptxas's per-kernel usage (registers, spill_stores, spill_loads, stack_frame,
    shared_bytes, const_bytes, barriers; empty when ptxas reported none), `contract` the launch
    contract as a dict and `contract_json` as the JSON text the validator parses, `sass` the SASS text
    or None when neither cuobjdump nor nvdisasm is installed, `metadata` the compile metadata (arch,
    PTX ISA, LLVM, cache source, stage seconds), `slow_paths` where the kernel left the fast path and
    why (dsl/perf.py: the compiler's records plus ptxas's spills), each with its source line."""
    kernel: str
    symbol: str
    arch: str
    resources: dict[str, Any]
    ptxas_log: str
    contract: dict[str, Any]
    contract_json: str
    sass: str | None
    metadata: dict[str, Any] = field(default_factory=dict)
    slow_paths: tuple[SlowPath, ...] = ()

    def __getitem__(self, key: str) -> Any:
        """The value under one of the dict keys `inspect()` returned before it returned this object."""
        try:
            return getattr(self, _LEGACY_KEYS[key])
        except KeyError:
            raise KeyError(f"KernelInfo has no key {key!r}; keys: {', '.join(_LEGACY_KEYS)}") from None

    def keys(self) -> tuple[str, ...]:
        """The old dict keys (`dict(info)` gives the dict `inspect()` used to return)."""
        return tuple(_LEGACY_KEYS)

    def __str__(self) -> str:
        lines = [f"kernel {self.kernel} (symbol {self.symbol}) for {self.arch}"]
        if self.resources:
            for key, label, unit in _RESOURCE_LINES:
                if key in self.resources:
                    lines.append(f"  {label + ':':<22}{self.resources[key]}{unit}")
        else:
            lines.append("  resources: ptxas reported none for this symbol")
        lines.append("  contract: " + _contract_summary(self.contract))
        for arg in self.contract.get("args", []):
            lines.append("    " + _arg_summary(arg))
        for rel in self.contract.get("requires", []):
            lines.append(f"    requires {rel}")
        source = self.metadata.get("cache")
        if source is not None:
            isa = self.metadata.get("ptx_version")
            isa_text = f"{isa // 10}.{isa % 10}" if isinstance(isa, int) else "?"
            lines.append(f"  compiled: cache {source}, PTX ISA {isa_text}")
        if self.slow_paths:                   # where the kernel left the fast path (dsl/perf.py)
            lines.append(f"  slow paths: {len(self.slow_paths)}")
            lines += [f"    {p}" for p in self.slow_paths]
        lines.append("  SASS: " + (f"{self.sass.count(chr(10))} lines (info.sass)" if self.sass
                                   else "not available (no cuobjdump / nvdisasm)"))
        return "\n".join(lines)


def _contract_summary(c: dict[str, Any]) -> str:
    block = c.get("block") or {}
    if "exact" in block:
        blk = "block exactly " + "x".join(str(b) for b in block["exact"])
    elif "max_threads" in block:
        blk = f"block at most {block['max_threads']} threads"
    else:
        blk = "any legal block"
    parts = [f"{c.get('domain', 1)}-D domain", blk]
    grid = c.get("grid_from")
    if grid:
        how = f"tiles {grid['tile']}" if "tile" in grid else f"per thread {grid.get('per_thread', [1, 1, 1])}"
        parts.append(f"grid from '{grid.get('arg')}' ({how})")
    else:
        parts.append("grid must be given")
    if c.get("min_cc"):
        parts.append(f"min cc {c['min_cc']}")
    smem = c.get("dynamic_smem") or {}
    if smem.get("exact") or smem.get("max"):
        parts.append(f"dynamic shared memory {'exactly' if 'exact' in smem else 'at most'} "
                     f"{smem.get('exact', smem.get('max'))} bytes")
    sites = len(c.get("fault_sites") or ())
    if sites:
        parts.append(f"{sites} run-time bounds check{'s' if sites > 1 else ''}")
    return ", ".join(parts)


def _arg_summary(a: dict[str, Any]) -> str:
    if a.get("kind") == "array":
        return (f"{a.get('name')}: {a.get('dtype')} array, ndim {a.get('ndim')}, layout {a.get('layout')}, "
                f"{a.get('access')}")
    return f"{a.get('name')}: {a.get('dtype')} scalar"


def inspect_ptx(kernel: str, symbol: str, ptx: str, contract_json: str, metadata: dict, arch: str) -> KernelInfo:
    """Registers, spills and shared memory (`ptxas -v` for `arch`), the contract (as a dict and as
    JSON text), the SASS when `nvdisasm`/`cuobjdump` exist, and the compile metadata."""
    from dsl.backend import sass
    from dsl.backend.ptxas import assemble
    usages, log = assemble(ptx, arch)
    usage = next((u for u in usages if u.kernel == symbol), usages[0] if usages else None)
    resources = usage.as_dict() if usage else {}
    return KernelInfo(kernel=kernel, symbol=symbol, arch=arch, resources=resources, ptxas_log=log,
                      contract=json.loads(contract_json), contract_json=contract_json,
                      sass=sass.disassemble(ptx, arch), metadata=dict(metadata),
                      slow_paths=tuple(slow_paths_of(metadata, resources)))


def slow_paths_of(metadata: dict, resources: dict) -> list[SlowPath]:
    """The compile's slow-path records (metadata) and those of ptxas's report (spills)."""
    file, line = (list(metadata.get("kernel_loc") or ()) + ["", 0])[:2]
    return unique([*from_metadata(metadata), *from_resources(resources, str(file), int(line))])
