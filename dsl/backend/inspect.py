"""`kernel.inspect(...)` for both kernel models: what ptxas says about the compiled PTX, the contract,
and the SASS when the disassembler is installed."""
from __future__ import annotations

import json
from typing import Any


def inspect_ptx(kernel: str, symbol: str, ptx: str, contract_json: str, metadata: dict, arch: str) -> dict:
    """Registers, spills and shared memory (`ptxas -v` for `arch`), the contract (as a dict and as
    JSON text), the SASS when `nvdisasm`/`cuobjdump` exist, and the compile metadata."""
    from dsl.backend import sass
    from dsl.backend.ptxas import assemble
    usages, log = assemble(ptx, arch)
    usage = next((u for u in usages if u.kernel == symbol), usages[0] if usages else None)
    info: dict[str, Any] = {"kernel": kernel, "symbol": symbol, "arch": arch,
                            "resources": usage.as_dict() if usage else {}, "ptxas_log": log,
                            "contract": contract_json, "contract_dict": json.loads(contract_json),
                            "sass": sass.disassemble(ptx, arch), "metadata": metadata}
    return info
