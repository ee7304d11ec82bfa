"""The SIMT code generator: typed IR -> llvmlite.ir -> LLVM NVPTX -> PTX.

Modules: `target` (NVPTX target machine and PTX version per arch), `lltypes` (IR -> LLVM types),
`values` (arrays/tuples/slots as flat LLVM values), `builder` (functions and statements),
`exprs` (expressions), `memory` (addressing, bounds checks, fault path, chunks, atomics, shared
memory), `intrinsics` (the one table of NVPTX intrinsics / libdevice names), `libdevice` (find + link),
`debuginfo` (line tables: `.file`/`.loc` through LLVM debug metadata), `errors` (CodegenError),
`codegen` (LLVM IR text -> optimised module -> PTX), `ptxas` (assemble + resource usage), `sass`
(disassembly when the toolkit has it). Only `dsl.compiler` drives these stages.
"""
