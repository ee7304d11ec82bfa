"""cpp/kernels/llm/ (the kernels of a GPT-2 training step) without a GPU: every family compiles with
the package build's nvcc line (SASS sm_80 and sm_90, PTX compute_90) with no spills or stack, the
contracts embedded in the fatbins name the arguments, dtypes, ranks, access, blocks, grids and
relations written here, they parse in the native validator, the validator derives GPT-2-small grids
and refuses wrong launches, and the argument generator (the porting workflow's) satisfies them.
The GPU half is test_llm_kernels_gpu.py."""
from __future__ import annotations

import json
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import bridge
import bridge.testing
from bridge import _native
from bridge.fatbin import embedded_contracts, fatbin_entries
from interop_tests.contract.contract_support import attrs, desc, limits
from interop_tests.cpp import llm_kit

pytestmark = pytest.mark.slow      # the long tail (pyproject.toml): seven nvcc builds, ~8 s on 2 cores

R, W, RW = "read", "write", "readwrite"
# kernel -> (args [(name, dtype, ndim or None for scalars, access)], block, grid_from (arg, per_thread x) or None,
#            requires)
EXPECTED: dict[str, tuple[list, dict, tuple[str, int] | None, list[str]]] = {
    "layernorm_forward": (
        [("out", "f32", 2, W), ("mean", "f32", 1, W), ("rstd", "f32", 1, W), ("inp", "f32", 2, R),
         ("weight", "f32", 1, R), ("bias", "f32", 1, R), ("N", "i32", None, None), ("C", "i32", None, None)],
        {"exact": [256, 1, 1]}, None,
        ["out.shape == inp.shape", "inp.shape[0] == N", "inp.shape[1] == C", "C > 0", "len(mean) == N",
         "len(rstd) == N", "len(weight) == C", "len(bias) == C"]),
    "layernorm_backward": (
        [("dinp", "f32", 2, RW), ("dweight", "f32", 1, RW), ("dbias", "f32", 1, RW), ("dout", "f32", 2, R),
         ("inp", "f32", 2, R), ("weight", "f32", 1, R), ("mean", "f32", 1, R), ("rstd", "f32", 1, R),
         ("N", "i32", None, None), ("C", "i32", None, None)],
        {"exact": [256, 1, 1]}, None,
        ["dinp.shape == inp.shape", "dout.shape == inp.shape", "inp.shape[0] == N", "inp.shape[1] == C", "C > 0",
         "C <= 4096", "len(weight) == C", "len(dweight) == C", "len(dbias) == C", "len(mean) == N",
         "len(rstd) == N"]),
    "gelu_forward_bf16": (
        [("out", "bf16", 1, W), ("inp", "bf16", 1, R), ("N", "i32", None, None)],
        {"max_threads": 512}, ("out", 8), ["len(out) == N", "len(inp) == N"]),
    "gelu_backward_bf16": (
        [("dinp", "bf16", 1, W), ("inp", "bf16", 1, R), ("dout", "bf16", 1, R), ("N", "i32", None, None)],
        {"max_threads": 512}, ("dinp", 8), ["len(dinp) == N", "len(inp) == N", "len(dout) == N"]),
    "gelu_forward_f32": (
        [("out", "f32", 1, W), ("inp", "f32", 1, R), ("N", "i32", None, None)],
        {"max_threads": 512}, ("out", 1), ["len(out) == N", "len(inp) == N"]),
    "gelu_backward_f32": (
        [("dinp", "f32", 1, W), ("inp", "f32", 1, R), ("dout", "f32", 1, R), ("N", "i32", None, None)],
        {"max_threads": 512}, ("dinp", 1), ["len(dinp) == N", "len(inp) == N", "len(dout) == N"]),
    "residual_forward": (
        [("out", "f32", 1, W), ("inp1", "f32", 1, R), ("inp2", "f32", 1, R), ("N", "i32", None, None)],
        {"max_threads": 512}, ("out", 4), ["len(out) == N", "len(inp1) == N", "len(inp2) == N"]),
    "encoder_forward": (
        [("out", "f32", 3, W), ("inp", "i32", 2, R), ("wte", "f32", 2, R), ("wpe", "f32", 2, R),
         ("B", "i32", None, None), ("T", "i32", None, None), ("C", "i32", None, None), ("V", "i32", None, None)],
        {"max_threads": 512}, None,
        ["out.shape[0] == B", "out.shape[1] == T", "out.shape[2] == C", "inp.shape[0] == B", "inp.shape[1] == T",
         "wte.shape[0] == V", "wte.shape[1] == C", "wpe.shape[1] == C", "wpe.shape[0] >= T"]),
    "encoder_backward": (
        [("dwte", "f32", 2, RW), ("dwpe", "f32", 2, RW), ("dout", "f32", 3, R), ("inp", "i32", 2, R),
         ("B", "i32", None, None), ("T", "i32", None, None), ("C", "i32", None, None), ("V", "i32", None, None)],
        {"max_threads": 512}, None,
        ["dout.shape[0] == B", "dout.shape[1] == T", "dout.shape[2] == C", "inp.shape[0] == B",
         "inp.shape[1] == T", "dwte.shape[0] == V", "dwte.shape[1] == C", "dwpe.shape[1] == C",
         "dwpe.shape[0] >= T"]),
    "crossentropy_forward": (
        [("losses", "f32", 1, W), ("logits", "f32", 2, R), ("targets", "i32", 1, R), ("N", "i32", None, None),
         ("V", "i32", None, None), ("Vp", "i32", None, None)],
        {"exact": [1024, 1, 1]}, None,
        ["logits.shape[0] == N", "logits.shape[1] == Vp", "len(losses) == N", "len(targets) == N", "V > 0",
         "V <= Vp"]),
    "crossentropy_backward": (
        [("dlogits", "f32", 2, W), ("logits", "f32", 2, R), ("dlosses", "f32", 1, R), ("targets", "i32", 1, R),
         ("N", "i32", None, None), ("V", "i32", None, None), ("Vp", "i32", None, None)],
        {"exact": [1024, 1, 1]}, None,
        ["dlogits.shape == logits.shape", "logits.shape[0] == N", "logits.shape[1] == Vp", "len(dlosses) == N",
         "len(targets) == N", "V > 0", "V <= Vp"]),
    "adamw_update": (
        [("params", "f32", 1, RW), ("m", "f32", 1, RW), ("v", "f32", 1, RW), ("grads", "f32", 1, R),
         ("n", "i64", None, None), ("lr", "f32", None, None), ("beta1", "f32", None, None),
         ("beta2", "f32", None, None), ("eps", "f32", None, None), ("weight_decay", "f32", None, None),
         ("grad_scale", "f32", None, None), ("t", "i32", None, None)],
        {"max_threads": 512}, ("params", 1),
        ["len(params) == n", "len(m) == n", "len(v) == n", "len(grads) == n", "t >= 1"]),
    "global_norm_squared": (
        [("out", "f32", 1, RW), ("values", "f32", 1, R), ("n", "i64", None, None)],
        {"exact": [512, 1, 1]}, ("values", 16), ["len(out) == 1", "len(values) == n"]),
}
ALIGN16 = {("gelu_forward_bf16", "out"), ("gelu_forward_bf16", "inp"), ("gelu_backward_bf16", "dinp"),
           ("gelu_backward_bf16", "inp"), ("gelu_backward_bf16", "dout"), ("residual_forward", "out"),
           ("residual_forward", "inp1"), ("residual_forward", "inp2"), ("encoder_forward", "out"),
           ("encoder_forward", "wte"), ("encoder_forward", "wpe")}
MODULE_OF = {k: m for m, ks in bridge.cpp_kernels.LLM_KERNELS.items() for k in ks}


@pytest.fixture(scope="module")
def built(nvcc, tmp_path_factory) -> dict[str, tuple[int, bytes | None, str]]:
    """module -> (nvcc return code, fatbin, nvcc + ptxas output), every family built side by side."""
    root = tmp_path_factory.mktemp("llm")

    def build(item: tuple[str, Path]) -> tuple[str, tuple[int, bytes | None, str]]:
        module, source = item
        out = root / f"{module}.fatbin"
        proc = subprocess.run(llm_kit.nvcc_command(nvcc, source, out), capture_output=True, text=True, timeout=300)
        data = out.read_bytes() if proc.returncode == 0 and out.exists() else None
        return module, (proc.returncode, data, proc.stdout + proc.stderr)

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(pool.map(build, llm_kit.family_sources().items()))


def _contract_text(built, kernel: str) -> str:
    rc, data, log = built[MODULE_OF[kernel]]
    assert rc == 0, log
    return embedded_contracts(data)[kernel]


# ---- the Python table, the sources and the package build agree ----------------------------------------
def test_kernel_table_names_every_family_source_and_kernel():
    assert set(bridge.cpp_kernels.LLM_KERNELS) == set(llm_kit.family_sources())
    assert sorted(MODULE_OF) == sorted(EXPECTED)
    cmake = (llm_kit.ROOT / "CMakeLists.txt").read_text()
    assert "cpp/kernels/llm/*.cu" in cmake and "kernelbridge_add_cuda_module(llm_${kb_family}" in cmake


def test_llm_kernel_refuses_an_unknown_name_and_names_the_known_ones():
    with pytest.raises(ValueError, match=r"kernel: expected one of the cpp/kernels/llm kernels \(layernorm_forward"):
        bridge.cpp_kernels.llm_kernel("softmax_forward")


@pytest.mark.parametrize("module", sorted(bridge.cpp_kernels.LLM_KERNELS))
def test_family_compiles_for_sm80_and_sm90_without_spills(built, module):
    rc, data, log = built[module]
    assert rc == 0, log
    assert sorted((e.kind, e.arch) for e in fatbin_entries(data)) == [("elf", 80), ("elf", 90), ("ptx", 90)]
    entries = re.findall(r"Compiling entry function '(\w+)' for 'sm_(\d+)'", log)
    assert sorted(entries) == sorted((k, a) for k in bridge.cpp_kernels.LLM_KERNELS[module] for a in ("80", "90"))
    frames = re.findall(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", log)
    assert len(frames) == len(entries) and all(f == ("0", "0", "0") for f in frames), log


# ---- the embedded contracts -----------------------------------------------------------------------------
@pytest.mark.parametrize("kernel", sorted(EXPECTED))
def test_embedded_contract_names_args_dtypes_block_grid_and_relations(built, kernel):
    rc, data, log = built[MODULE_OF[kernel]]
    assert rc == 0, log
    contracts = embedded_contracts(data)
    assert sorted(contracts) == sorted(bridge.cpp_kernels.LLM_KERNELS[MODULE_OF[kernel]])
    c = json.loads(contracts[kernel])
    args, block, grid_from, requires = EXPECTED[kernel]
    got = [(a["name"], a["dtype"], a.get("ndim"), a.get("access")) for a in c["args"]]
    assert got == args
    for a in c["args"]:
        assert a["kind"] == ("array" if a.get("ndim") else "scalar")
        if a["kind"] == "array":
            want_align = 16 if (kernel, a["name"]) in ALIGN16 else 0
            assert (a["layout"], a["abi"], a.get("align", 0)) == ("C", "pointer", want_align), a
    assert (c["kernel"], c["min_cc"], c["block"]) == (kernel, 80, block)
    got_grid = c.get("grid_from")
    assert (None if got_grid is None else (got_grid["arg"], got_grid["per_thread"][0])) == grid_from
    assert c["requires"] == requires


@pytest.mark.parametrize("kernel", sorted(EXPECTED))
def test_embedded_contract_parses_in_the_native_validator(built, kernel):
    text = _contract_text(built, kernel)
    parsed = _native.Contract(text)
    assert parsed.kernel == kernel
    assert [a["name"] for a in parsed.args] == [a[0] for a in EXPECTED[kernel][0]]
    assert list(parsed.requires) == EXPECTED[kernel][3]
    assert len(parsed.relation_trees) == len(EXPECTED[kernel][3])


# ---- the validator on GPT-2 small shapes (fake device pointers: nothing is dereferenced) ----------------
BT, C, V, VP, MAXT = 8 * 1024, 768, 50257, 50304, 1024


def _validate(built, kernel: str, args: list, grid=None, block=None):
    return _native.validate(_native.Contract(_contract_text(built, kernel)), args, grid=grid, block=block,
                            limits=limits(), attrs=attrs())


def _ptrs():
    base = iter(range(1 << 44, 1 << 50, 1 << 36))     # disjoint, 16-byte aligned fake allocations
    return lambda shape, dtype="f32": desc(shape, dtype, ptr=next(base))


def test_validator_derives_gpt2_small_grids_from_the_contracts(built):
    a = _ptrs()
    n4 = BT * 4 * C                                                # the MLP's GELU activations
    grid, block = _validate(built, "gelu_forward_bf16", [a((n4,), "bf16"), a((n4,), "bf16"), n4])
    assert (grid, block) == ((n4 // (256 * 8), 1, 1), (256, 1, 1))     # the validator's default block: 256
    grid, _ = _validate(built, "gelu_forward_bf16", [a((n4,), "bf16"), a((n4,), "bf16"), n4], block=512)
    assert grid == (n4 // (512 * 8), 1, 1)
    grid, _ = _validate(built, "residual_forward", [a((BT * C,)), a((BT * C,)), a((BT * C,)), BT * C], block=256)
    assert grid == (BT * C // (256 * 4), 1, 1)
    grid, _ = _validate(built, "global_norm_squared", [a((1,)), a((n4,)), n4])
    assert grid == (n4 // (512 * 16), 1, 1)
    grid, block = _validate(built, "layernorm_forward",
                            [a((BT, C)), a((BT,)), a((BT,)), a((BT, C)), a((C,)), a((C,)), BT, C], grid=BT // 8)
    assert (grid, block) == ((BT // 8, 1, 1), (256, 1, 1))
    grid, _ = _validate(built, "crossentropy_forward", [a((BT,)), a((BT, VP)), a((BT,), "i32"), BT, V, VP], grid=BT)
    assert grid == (BT, 1, 1)


def test_validator_refuses_grid_less_launch_of_a_row_kernel(built):
    a = _ptrs()
    with pytest.raises(bridge.GridSizeError, match="layernorm_forward"):
        _validate(built, "layernorm_forward", [a((BT, C)), a((BT,)), a((BT,)), a((BT, C)), a((C,)), a((C,)), BT, C])


def test_validator_refuses_padding_smaller_than_the_vocabulary(built):
    a = _ptrs()
    with pytest.raises(bridge.ShapeRelationError, match="V <= Vp"):
        _validate(built, "crossentropy_forward", [a((BT,)), a((BT, V)), a((BT,), "i32"), BT, VP, V], grid=BT)


def test_validator_refuses_misaligned_bf16_gelu_input(built):
    a = _ptrs()
    n = 1000
    with pytest.raises(bridge.AlignmentError, match="gelu_forward_bf16: argument 'inp' \\(#1\\)"):
        _validate(built, "gelu_forward_bf16", [a((n,), "bf16"), desc((n,), "bf16", ptr=(1 << 52) + 2), n])


# ---- the porting workflow's argument generator satisfies every contract ---------------------------------
@pytest.mark.parametrize("kernel", sorted(EXPECTED))
def test_argument_generator_satisfies_the_contract(built, kernel):
    text = _contract_text(built, kernel)
    grid = None if json.loads(text).get("grid_from") else (3,)
    scalars = {"V": 5} if kernel.startswith("crossentropy") else None   # V is free below the padded width
    args = bridge.testing.arguments(text, size=300, seed=7, grid=grid, scalars=scalars)
    assert [a[0] for a in EXPECTED[kernel][0]] == list(args.names)


# ---- the installed package ships them (after a build that knew cpp/kernels/llm/) ---------------------------
def test_installed_package_ships_every_family_with_its_contracts(nvcc):
    info = bridge.cpp_kernels.build_info() or {}
    recorded = set((info.get("cpp_kernels") or {}).get("modules") or [])
    if not recorded & set(bridge.cpp_kernels.LLM_KERNELS):
        pytest.skip("the installed package was built before cpp/kernels/llm/ existed: reinstall it "
                    "(python -m pip install --no-build-isolation --no-deps -e .) to check what it ships")
    for module, kernels in bridge.cpp_kernels.LLM_KERNELS.items():
        assert module in recorded, f"{module} is missing from the build record {sorted(recorded)}"
        data = bridge.cpp_kernels.path(module).read_bytes()
        assert sorted(embedded_contracts(data)) == sorted(kernels)
        assert sorted((e.kind, e.arch) for e in fatbin_entries(data)) == [("elf", 80), ("elf", 90), ("ptx", 90)]
