"""Every kernel of the shared zoo (interop_tests/kernels_zoo.py) compiles through the real pipeline to
PTX without `trap` that ptxas accepts for sm_80 and sm_90, with resource usage reported."""
from __future__ import annotations

import re

import numpy as np
import pytest

from dsl.backend.ptxas import assemble
from interop_tests.dsl_codegen.codegen_kit import require_ptxas
from interop_tests.kernels_zoo import ZOO


@pytest.mark.parametrize("case", ZOO, ids=lambda c: c.name)
def test_zoo_kernel_compiles_and_assembles(case, monkeypatch, tmp_path):
    require_ptxas()
    monkeypatch.setenv("KB_CACHE_DIR", str(tmp_path))
    launch = case.make(np.random.default_rng(7), case.sizes[0])
    for arch in ("sm_80", "sm_90"):
        ck = case.kernel.compile(*launch.args, arch=arch)
        assert f".entry {ck.name}(" in ck.ptx and not re.search(r"\btrap\b", ck.ptx)
        usages, _ = assemble(ck.ptx, arch)
        assert [u.kernel for u in usages] == [ck.name] and usages[0].registers > 0
        assert usages[0].spill_stores == 0
