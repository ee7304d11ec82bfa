"""Launch features as contract fields (pdl, cooperative, cluster): their JSON spelling, the Python builder,
the C++ clause macros, the checksum over them, and the ONE validator's refusals — off the GPU, with a
stand-in for the driver's occupancy answers (the GPU half: interop_tests/runtime/test_launch_features_gpu.py)."""
from __future__ import annotations

import json
import subprocess

import pytest

import bridge
from bridge import _native
from bridge.contract import ArgSpec, LaunchContract
from bridge.fatbin import ContractIntegrityError, elf_contracts, embedded_contracts, ptx_contract_directives
from contract_support import GOOD_CONTRACT, arr, attrs, contract, desc, limits

OUT = [arr("out", access="write", layout="C")]


def feature_contract(**extra):
    return contract(OUT, kernel="feat", block={"exact": [128]}, **extra)


class FakeOccupancy:
    """Stands in for cuOccupancyMaxActiveBlocksPerMultiprocessor / cuOccupancyMaxActiveClusters and
    records what the validator asked."""

    def __init__(self, per_sm: int = 2, clusters: int = 4) -> None:
        self.per_sm, self.clusters, self.asked = per_sm, clusters, []

    def blocks_per_sm(self, threads, smem):
        self.asked.append(("blocks_per_sm", threads, smem))
        return self.per_sm

    def active_clusters(self, grid, block, smem, cluster):
        self.asked.append(("active_clusters", grid, block, smem, cluster))
        return self.clusters


def validate(c, grid, occ=None, lim=None, fn=None, smem=None, block=None):
    return _native.validate(c, [desc((4096,))], grid=grid, block=block, smem=smem, limits=lim or limits(),
                            attrs=fn or attrs(), occupancy=occ)


# --- schema: JSON spelling, Python builder, round trips ------------------------------------------------

def test_native_contract_reads_and_writes_back_each_feature():
    c = feature_contract(pdl=True, cooperative=True, cluster=[2, 2], cluster_nonportable=True)
    assert (c.pdl, c.cooperative, c.cluster, c.cluster_nonportable) == (True, True, (2, 2, 1), True)
    back = json.loads(c.to_json())
    assert (back["pdl"], back["cooperative"], back["cluster"], back["cluster_nonportable"]) == (True, True,
                                                                                               [2, 2, 1], True)
    assert _native.Contract(c.to_json()) == c


def test_contracts_without_features_keep_their_bytes():
    c = _native.Contract(json.dumps(GOOD_CONTRACT))
    text = c.to_json()
    for key in ("pdl", "cooperative", "cluster", "cluster_nonportable"):
        assert f'"{key}"' not in text
    assert (c.pdl, c.cooperative, c.cluster, c.cluster_nonportable) == (False, False, None, False)
    explicit_off = dict(GOOD_CONTRACT, pdl=False, cooperative=False, cluster=None)
    assert _native.Contract(json.dumps(explicit_off)).to_json() == text


def test_python_builder_round_trips_through_dict_and_json():
    c = LaunchContract("feat", [ArgSpec.array("out", "f32", access="write")], block=128, pdl=True,
                       cooperative=True, cluster=(3, 3), cluster_nonportable=True, grid_from="out")
    d = c.to_dict()
    assert (d["pdl"], d["cooperative"], d["cluster"], d["cluster_nonportable"]) == (True, True, [3, 3, 1], True)
    for again in (LaunchContract.from_dict(d), LaunchContract.from_json(c.to_json())):
        assert again == c
        assert (again.pdl, again.cooperative, again.cluster, again.cluster_nonportable) == (True, True,
                                                                                            (3, 3, 1), True)
    assert c.native().cluster == (3, 3, 1)


def test_python_builder_defaults_write_no_feature_keys():
    d = LaunchContract("plain", [ArgSpec.array("out", "f32", access="write")]).to_dict()
    assert not {"pdl", "cooperative", "cluster", "cluster_nonportable"} & set(d)


def test_python_builder_pads_an_int_cluster():
    c = LaunchContract("feat", [ArgSpec.array("out", "f32", access="write")], cluster=4)
    assert c.cluster == (4, 1, 1) and c.native().cluster == (4, 1, 1)


BAD_JSON = {
    "pdl_not_bool": ({"pdl": 1}, "pdl: expected true or false, got a number"),
    "cooperative_not_bool": ({"cooperative": "yes"}, "cooperative: expected true or false, got a string"),
    "cluster_zero": ({"cluster": [0]}, "cluster[0]: expected an integer in [1, 16], got 0"),
    "cluster_axis_17": ({"cluster": [1, 17]}, "cluster[1]: expected an integer in [1, 16], got 17"),
    "cluster_four_axes": ({"cluster": [1, 1, 1, 1]}, "cluster: expected 1 to 3 elements, got 4"),
    "cluster_not_list": ({"cluster": 2}, "cluster: expected an array, got a number"),
    "cluster_over_portable": ({"cluster": [3, 3]}, "cluster: expected at most 8 blocks per cluster (the portable "
                                                   "limit; declare cluster_nonportable for up to 16), got 9"),
    "cluster_over_nonportable": ({"cluster": [4, 5], "cluster_nonportable": True},
                                 "cluster: expected at most 16 blocks per cluster (the non-portable limit), got 20"),
    "nonportable_alone": ({"cluster_nonportable": True}, "cluster_nonportable: only meaningful with a cluster"),
    "nonportable_not_bool": ({"cluster": [2], "cluster_nonportable": 0},
                             "cluster_nonportable: expected true or false, got a number"),
}


@pytest.mark.parametrize("case", sorted(BAD_JSON))
def test_bad_feature_values_are_contract_definition_errors_naming_the_field(case):
    extra, message = BAD_JSON[case]
    with pytest.raises(bridge.ContractDefinitionError) as info:
        feature_contract(**extra)
    assert str(info.value) == f"feat: invalid contract: {message}"


@pytest.mark.parametrize("kw", [{"pdl": 1}, {"cooperative": None}, {"cluster_nonportable": "no"}],
                         ids=["pdl", "cooperative", "cluster_nonportable"])
def test_python_builder_refuses_non_bool_flags(kw):
    name = next(iter(kw))
    with pytest.raises(bridge.ContractDefinitionError, match=f"feat: invalid contract: {name}: expected True or False"):
        LaunchContract("feat", [], **kw)


@pytest.mark.parametrize("cluster", [(0,), (9,), (2, 2, 4), (1, 2, 3, 4), "2"])
def test_python_builder_refuses_bad_clusters(cluster):
    with pytest.raises(bridge.ContractDefinitionError, match="cluster"):
        LaunchContract("feat", [ArgSpec.array("out", "f32", access="write")], cluster=cluster)


# --- integrity: the checksum covers the feature fields --------------------------------------------------

def test_checksum_covers_feature_fields():
    text = feature_contract(pdl=True, cooperative=True, cluster=[2]).to_json()
    ptx = ".version 8.0\n.target sm_90\n.address_size 64\n" + ptx_contract_directives("feat", text)
    assert json.loads(embedded_contracts(ptx)["feat"])["cooperative"] is True
    for old, new in (('"cooperative":true', '"cooperative":false'), ('"cluster":[2,1,1]', '"cluster":[4,1,1]'),
                     ('"pdl":true', '"pdl":false')):
        tampered = ptx.replace(_ptx_bytes(old), _ptx_bytes(new))
        assert tampered != ptx
        with pytest.raises(ContractIntegrityError, match="feat: the contract in the PTX fails its checksum"):
            embedded_contracts(tampered)


def _ptx_bytes(text: str) -> str:
    """How ptx_contract_directives spells a run of JSON bytes inside the .b8 initialiser."""
    return ", ".join(str(b) for b in text.encode())


# --- validator: cooperative grids ------------------------------------------------------------------------

def test_cooperative_grid_up_to_the_co_resident_blocks_is_accepted():
    occ = FakeOccupancy(per_sm=2)
    assert validate(feature_contract(cooperative=True), grid=264, occ=occ) == ((264, 1, 1), (128, 1, 1))
    assert occ.asked == [("blocks_per_sm", 128, 0)]


def test_cooperative_grid_past_the_co_resident_blocks_is_refused_naming_grid_and_limit():
    with pytest.raises(bridge.CooperativeGridError) as info:
        validate(feature_contract(cooperative=True), grid=(133, 2), occ=FakeOccupancy(per_sm=2))
    assert isinstance(info.value, bridge.GridSizeError)
    assert str(info.value) == (
        "feat: cooperative grid (133, 2, 1): expected at most 264 blocks, all co-resident (2 per SM for a block "
        "of 128 threads with 0 bytes of dynamic shared memory, x 132 SMs), got 266 blocks")
    assert info.value.kernel == "feat"


def test_cooperative_occupancy_is_asked_for_the_resolved_block_and_shared_memory():
    c = contract(OUT, kernel="feat", block={"max_threads": 512}, dynamic_smem={"max": 8192}, cooperative=True)
    occ = FakeOccupancy(per_sm=1)
    validate(c, grid=100, block=(16, 8), smem=4096, occ=occ)
    assert occ.asked == [("blocks_per_sm", 128, 4096)]


def test_cooperative_kernel_that_cannot_be_resident_at_all_is_refused():
    with pytest.raises(bridge.CooperativeGridError, match="expected at most 0 blocks"):
        validate(feature_contract(cooperative=True), grid=1, occ=FakeOccupancy(per_sm=0))


def test_cooperative_grid_without_a_driver_uses_the_declared_simulator_limit():
    c = feature_contract(cooperative=True)
    assert validate(c, grid=6, lim=limits(sim_max_coresident=6))[0] == (6, 1, 1)
    with pytest.raises(bridge.CooperativeGridError, match=r"expected at most 6 blocks, all co-resident \(the "
                                                          r"simulator's declared limit\), got 7 blocks"):
        validate(c, grid=7, lim=limits(sim_max_coresident=6))


def test_cooperative_grid_without_a_driver_or_declared_limit_skips_only_that_check():
    # documented: no GPU figure is invented off the GPU
    assert validate(feature_contract(cooperative=True), grid=10**6)[0] == (10**6, 1, 1)


def test_plain_kernel_never_asks_for_occupancy():
    occ = FakeOccupancy()
    validate(feature_contract(pdl=True), grid=10**6, occ=occ)
    assert occ.asked == []


# --- validator: clusters -----------------------------------------------------------------------------

def test_cluster_launch_that_divides_the_grid_is_accepted_and_asks_cluster_occupancy():
    occ = FakeOccupancy()
    assert validate(feature_contract(cluster=[2, 2]), grid=(4, 6), occ=occ)[0] == (4, 6, 1)
    assert occ.asked == [("active_clusters", (4, 6, 1), (128, 1, 1), 0, (2, 2, 1))]


@pytest.mark.parametrize("grid,axis,got", [((5, 2), "x", 5), ((4, 3), "y", 3)])
def test_grid_not_divisible_by_the_cluster_is_refused(grid, axis, got):
    with pytest.raises(bridge.ClusterError) as info:
        validate(feature_contract(cluster=[2, 2]), grid=grid, occ=FakeOccupancy())
    assert f"expected every dimension divisible by the cluster (2, 2, 1), got {got} in {axis}" in str(info.value)


def test_cluster_below_sm90_is_a_compute_capability_error():
    with pytest.raises(bridge.ComputeCapabilityError) as info:
        validate(feature_contract(cluster=[2]), grid=4, lim=limits(cc=80))
    assert str(info.value) == "feat: thread-block cluster (2, 1, 1): expected sm_90 or newer, got sm_80"


def test_cluster_unlike_the_compiled_cluster_dims_is_refused():
    with pytest.raises(bridge.ClusterError) as info:
        validate(feature_contract(cluster=[2]), grid=8, fn=attrs(required_cluster=(4, 1, 1)))
    assert str(info.value) == ("feat: cluster: expected (4, 1, 1) (compiled into the function: __cluster_dims__ / "
                               ".reqnctapercluster), got (2, 1, 1) (the contract's)")


def test_compiled_cluster_without_contract_cluster_still_needs_a_divisible_grid():
    c = feature_contract()
    assert validate(c, grid=8, fn=attrs(required_cluster=(4, 1, 1)))[0] == (8, 1, 1)
    with pytest.raises(bridge.ClusterError, match=r"divisible by the compiled cluster \(4, 1, 1\), got 6 in x"):
        validate(c, grid=6, fn=attrs(required_cluster=(4, 1, 1)))


def test_function_that_must_have_a_cluster_needs_one_in_the_contract():
    with pytest.raises(bridge.ClusterError, match="explicitcluster"):
        validate(feature_contract(), grid=8, fn=attrs(cluster_must_be_set=True))


def test_unschedulable_cluster_is_refused_naming_blocks_and_shared_memory():
    c = contract(OUT, kernel="feat", block={"exact": [128]}, dynamic_smem={"max": 200000}, cluster=[4, 2],
                 cluster_nonportable=False)
    with pytest.raises(bridge.ClusterError) as info:
        validate(c, grid=(8, 2), smem=150000, occ=FakeOccupancy(clusters=0), fn=attrs(static_smem=1024))
    assert str(info.value) == (
        "feat: cluster (4, 2, 1) of 8 blocks with 151024 bytes shared memory per block (block (128, 1, 1)) "
        "cannot be scheduled: expected a cluster the device can co-schedule (cuOccupancyMaxActiveClusters > 0), "
        "got 0")


def test_empty_derived_grid_checks_no_launch_feature():
    c = contract(OUT, kernel="feat", block={"exact": [128]}, grid_from={"arg": "out"}, cluster=[2],
                 cooperative=True)
    occ = FakeOccupancy(per_sm=0, clusters=0)
    _native.validate(c, [desc((0,))], limits=limits(cc=80), attrs=attrs(), occupancy=occ)
    assert occ.asked == []


def test_function_attrs_required_cluster_reads_back_and_ignores_partial_values():
    a = attrs(required_cluster=(2, 1, 1))
    assert a.required_cluster == (2, 1, 1)
    a.required_cluster = (2, 0, 1)             # the driver's rule: all 0 or all positive
    assert a.required_cluster == (0, 0, 0)


# --- C++: the clause macros ------------------------------------------------------------------------------

CPP = r'''
#include "kernelbridge/kernel_contract.cuh"
extern "C" __global__ void chain(const float* x, float* y) {}
KB_CONTRACT(chain, KB_BLOCK(128), KB_PDL(), KB_ARGS(KB_ARRAY(x, f32, 1, read), KB_ARRAY(y, f32, 1, write)),
            KB_GRID_FROM(y));
extern "C" __global__ void gridsync(float* y, int n) {}
KB_CONTRACT(gridsync, KB_BLOCK(256), KB_COOPERATIVE(), KB_ARGS(KB_ARRAY(y, f32, 1, readwrite), KB_SCALAR(n, i32)));
extern "C" __global__ void pairs(float* y) {}
KB_CONTRACT(pairs, KB_BLOCK(64), KB_CLUSTER(2), KB_ARGS(KB_ARRAY(y, f32, 1, write)), KB_GRID_FROM(y));
extern "C" __global__ void wide(const float* x, float* y) {}
KB_CONTRACT(wide, KB_DOMAIN(2), KB_BLOCK(8, 8), KB_CLUSTER_NONPORTABLE(4, 4), KB_PDL(), KB_COOPERATIVE(),
            KB_MIN_CC(90), KB_SMEM_MAX(1024), KB_ARGS(KB_ARRAY(x, f32, 2, read), KB_ARRAY(y, f32, 2, write)),
            KB_REQUIRES("y.size > 0"), KB_INPLACE((x, y)), KB_GRID_FROM(y));
'''


def _compile(nvcc, tmp_path, source, name):
    src = tmp_path / f"{name}.cu"
    src.write_text(source)
    out = tmp_path / f"{name}.cubin"
    proc = subprocess.run([nvcc, "-cubin", "-arch=sm_90", "-std=c++17", f"-I{bridge.cpp_kernels.include_dir()}",
                           str(src), "-o", str(out)], capture_output=True, text=True, timeout=300)
    return proc.returncode, (out.read_bytes() if proc.returncode == 0 else None), proc.stdout + proc.stderr


@pytest.mark.slow
def test_cpp_clause_macros_embed_the_feature_fields(nvcc, tmp_path):
    rc, cubin, diag = _compile(nvcc, tmp_path, CPP, "ok")
    assert rc == 0, diag
    got = {k: json.loads(v) for k, v in elf_contracts(cubin).items()}     # checksums verified on read
    assert got["chain"]["pdl"] is True and "cooperative" not in got["chain"]
    assert got["gridsync"]["cooperative"] is True and "pdl" not in got["gridsync"]
    assert got["pairs"]["cluster"] == [2, 1, 1] and "cluster_nonportable" not in got["pairs"]
    wide = got["wide"]
    assert (wide["cluster"], wide["cluster_nonportable"], wide["pdl"], wide["cooperative"]) == ([4, 4, 1], True,
                                                                                              True, True)
    native = _native.Contract(elf_contracts(cubin)["wide"])         # 11 clauses, every kind that can combine
    assert (native.cluster, native.cluster_nonportable, native.pdl, native.cooperative) == ((4, 4, 1), True,
                                                                                           True, True)


CPP_MISUSE = {
    "portable_cluster_too_big": ('KB_CLUSTER(3, 3)', "KB_CLUSTER needs 1..8 blocks"),
    "nonportable_too_big": ('KB_CLUSTER_NONPORTABLE(4, 8)', "KB_CLUSTER_NONPORTABLE needs 1..16 blocks"),
    "cluster_not_literal": ('KB_CLUSTER(kTwo)', "KB_CLUSTER takes decimal integer literals"),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(CPP_MISUSE))
def test_cpp_cluster_misuse_fails_to_compile(nvcc, tmp_path, case):
    clause, message = CPP_MISUSE[case]
    source = ('#include "kernelbridge/kernel_contract.cuh"\nconstexpr int kTwo = 2;\n'
              'extern "C" __global__ void k(float* y) {}\n'
              f'KB_CONTRACT(k, {clause}, KB_ARGS(KB_ARRAY(y, f32, 1, write)));\n')
    rc, _, diag = _compile(nvcc, tmp_path, source, case)
    assert rc != 0
    assert message in diag
