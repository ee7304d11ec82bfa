"""Range proofs remove run-time bounds checks only where the access is provably in range; every other
access carries a numbered fault site (file, line, array) unless boundscheck=False."""
from __future__ import annotations

import linecache

import numpy as np

from dsl import f32, i32, simt
from dsl.ir import nodes as ir
from interop_tests.dsl_frontend.frontend_helpers import f32v, nodes_of

BLOCK = 128


def checks(fn: ir.Function) -> list[str]:
    return [n.check for n in nodes_of(fn, ir.Load)]


@simt.kernel(block=256, requires=["len(a) == len(out)", "len(b) == len(out)"])
def vecadd_proven(a: simt.Array[f32], b: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    out[i] = a[i] + b[i]


@simt.kernel(block=256)
def vecadd_unproven(a: simt.Array[f32], b: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    out[i] = a[i] + b[i]  # SITE-AB


@simt.kernel(block=256, boundscheck=False)
def vecadd_nocheck(a: simt.Array[f32], b: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    out[i] = a[i] + b[i]


ARGS = (f32v(), f32v(), f32v())


def test_requires_relation_proves_the_guarded_loads():
    fn = vecadd_proven.build(*ARGS)
    assert checks(fn) == ["none", "none"]
    assert fn.fault_sites == []
    (region,) = [s for s in fn.body if isinstance(s, ir.GuardedRegion)]
    assert region.array.param.name == "out"
    assert isinstance(region.body[0], ir.Store) and region.body[0].mode == "guarded"


def test_without_the_relation_the_loads_are_checked_with_numbered_sites():
    fn = vecadd_unproven.build(*ARGS)
    assert checks(fn) == ["fault", "fault"]
    loads = nodes_of(fn, ir.Load)
    assert [ld.site for ld in loads] == [1, 2]
    line = next(k for k in range(1, 400) if "SITE-AB" in linecache.getline(__file__, k))
    assert [(s.id, s.array, s.loc.line) for s in fn.fault_sites] == [(1, "a", line), (2, "b", line)]
    assert fn.fault_sites[0].loc.file == __file__
    assert fn.fault_sites[0].loc.text.startswith("out[i] = a[i] + b[i]")


def test_boundscheck_false_removes_every_check():
    fn = vecadd_nocheck.build(*ARGS)
    assert checks(fn) == ["none", "none"] and fn.fault_sites == [] and fn.boundscheck is False


@simt.kernel(domain=2, requires=["a.shape == out.shape"])
def scale2d(a: simt.Array[f32, 2], out: simt.DisjointSlice[f32, 2], s: f32):
    idx = simt.thread.index_2d()
    out[idx] = a[idx] * s


def test_shape_relation_proves_two_dimensional_accesses():
    a = np.ones((5, 7), np.float32) * 3
    fn = scale2d.build(a, a.copy(), np.float32(2))
    assert checks(fn) == ["none"]


@simt.kernel(requires=["len(a) <= len(out)"])
def shorter(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    out[i] = a[i]


def test_an_ordering_relation_in_the_wrong_direction_proves_nothing():
    # len(a) <= len(out) does not put an index below len(out) below len(a)
    assert checks(shorter.build(f32v(), f32v())) == ["fault"]


@simt.kernel
def loop_sum(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    acc = f32(0)
    for j in range(len(a)):
        acc += a[j]
    for j in range(len(a) + 1):
        acc += a[j]
    for j in range(len(a) - 1, -1, -1):
        acc += a[j]
    out[i] = acc


def test_range_len_loop_variables_index_in_range():
    assert checks(loop_sum.build(f32v(), f32v())) == ["none", "fault", "none"]


@simt.kernel(domain=2)
def rows(a: simt.Array[f32, 2], out: simt.DisjointSlice[f32, 2]):
    idx = simt.thread.index_2d()
    r, c = idx
    acc = f32(0)
    if r < len(a):
        for j in range(a.shape[1]):
            acc += a[r, j]
    for j in range(a.shape[1]):
        acc += a[r, j]
    out[idx] = acc


def test_if_guard_and_shape_loop_combine_per_axis():
    a = np.ones((4, 6), np.float32)
    assert checks(rows.build(a, a.copy())) == ["none", "fault"]


@simt.kernel
def early_exit(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    if i >= len(a):
        return
    x = a[i]
    out[i] = x


@simt.kernel
def reassigned(a: simt.Array[f32], out: simt.DisjointSlice[f32], n: i32):
    i = simt.thread.index_1d()
    j = n
    if 0 <= j < len(a):
        x = a[j]
        j = j + 1
        x = x + a[j]
    out[i] = f32(0)


def test_early_return_guard_proves_the_rest_of_the_block():
    assert checks(early_exit.build(f32v(), f32v())) == ["none"]


def test_a_variable_assigned_inside_the_guard_loses_the_proof():
    assert checks(reassigned.build(f32v(), f32v(), np.int32(3))) == ["fault", "fault"]


@simt.kernel(block=BLOCK)
def shared_proofs(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    with simt.unsafe():
        buf = simt.shared.array(BLOCK, f32)
        dyn = simt.shared.dynamic(f32)
        t = simt.threadIdx.x
        buf[t] = f32(1)
        dyn[t] = f32(2)
        simt.sync_threads()
        x = buf[3] + buf[t] + dyn[t]
        if t < len(dyn):
            x += dyn[t]
    out[i] = x


def test_static_shared_arrays_use_constants_and_the_exact_block():
    fn = shared_proofs.build(f32v(), f32v())
    stores = [s for s in nodes_of(fn, ir.Store) if isinstance(s.array, ir.SharedArray)]
    assert [(s.array.alloc.name, s.mode) for s in stores] == [("buf", "unchecked"), ("dyn", "checked")]
    assert checks(fn) == ["none", "none", "fault", "none"]
    assert {s.array for s in fn.fault_sites} == {"dyn"}
    assert [a.type.shape for a in fn.shared] == [(BLOCK,), (-1,)]


@simt.kernel
def slots(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    slot = out.get_mut(i)
    if slot is None:
        return
    slot.set(a[i] * 2)


@simt.kernel(requires=["len(a) == len(out)"])
def slot_proves(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    slot = out.get_mut(i)
    if slot is not None:
        slot.set(a[i])


def test_a_tested_slot_may_be_set_and_carries_its_range():
    fn = slots.build(f32v(), f32v())
    (st,) = nodes_of(fn, ir.SlotSet)
    assert isinstance(st.slot, ir.GetMut)
    assert checks(fn) == ["fault"]
    fn2 = slot_proves.build(f32v(), f32v())
    assert checks(fn2) == ["none"]
    (cond,) = [s.cond for s in fn2.body if isinstance(s, ir.If)]
    assert isinstance(cond, ir.SlotCheck)


@simt.kernel(requires=["len(a) == len(out)"])
def chunked(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    c = simt.thread.chunk_1d(4)
    for k in c:
        out[k] = a[k] * 2.0


def test_chunk_loop_owns_its_index_and_is_guarded_on_the_written_array():
    fn = chunked.build(f32v(), f32v())
    (loop,) = [s for s in fn.body if isinstance(s, ir.ChunkLoop)]
    assert loop.array.param.name == "out" and loop.chunk.n == 4
    assert loop.body[0].mode == "guarded"
    assert checks(fn) == ["none"]


@simt.kernel(requires=["len(a) == len(out)"])
def guarded_ifexp(a: simt.Array[f32], b: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    x = b[i] if i < len(b) else f32(0)
    out[i] = x + a[i]


def test_conditional_expression_guard_proves_its_branch():
    assert checks(guarded_ifexp.build(f32v(), f32v(), f32v())) == ["none", "none"]


@simt.kernel
def slot_truthy(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    slot = out.get_mut(i)
    if slot:
        slot.set(a[i])


def test_a_slot_tested_for_truth_may_be_set():
    (st,) = nodes_of(slot_truthy.build(f32v(), f32v()), ir.SlotSet)
    assert isinstance(st.slot, ir.GetMut)


# ---- index arithmetic: sums and products of registers, loop variables and constants ------------------

T = 32


def test_guarded_index_sums_and_the_exact_block_prove_the_tiled_transpose():
    from interop_tests.kernels_zoo import transpose     # 32x33 shared tiles, block (32, 8, 1)
    fn = transpose.build(np.ones((70, 45), np.float32), np.ones((45, 70), np.float32))
    assert fn.fault_sites == []
    assert checks(fn) == ["none", "none"]
    assert {s.mode for s in nodes_of(fn, ir.Store)} == {"unchecked"}


@simt.kernel(domain=2, block=(32, 16, 1))
def tile_too_small(a: simt.Array[f32, 2], out: simt.DisjointSlice[f32, 2]):
    with simt.unsafe():
        tile = simt.shared.array((T, T), f32)
        ty = simt.threadIdx.y
        for j in range(0, T, 8):
            tile[ty + j, 0] = a[0, 0]   # SITE-TILE: ty + j reaches 15 + 24 = 39
        simt.sync_threads()
        i = simt.thread.index_2d()
        out[i] = tile[0, 0]


def test_a_sum_that_can_pass_the_static_extent_keeps_its_check():
    fn = tile_too_small.build(np.ones((3, 3), np.float32), np.ones((3, 3), np.float32))
    line = next(k for k in range(1, 600) if "SITE-TILE" in linecache.getline(__file__, k))
    assert [s.loc.line for s in fn.fault_sites if s.array == "tile"] == [line]


@simt.kernel(block=128)
def scaled_gather(a: simt.Array[f32], out: simt.DisjointSlice[f32], k: i32, m: i32):
    i = simt.thread.index_1d()
    if i * k < len(a):
        out[i] = a[i * k]          # SITE-UNBOUNDED: k is any i32, the product may wrap
    s = simt.threadIdx.x + k
    for j in range(4):
        s = s + j
        if s < len(a):
            out[i] = a[s]          # SITE-REASSIGNED: a plain variable, checked as before


def test_a_product_with_an_unbounded_scalar_keeps_its_check():
    fn = scaled_gather.build(f32v(), f32v(), np.int32(3), np.int32(1))
    line = next(k for k in range(1, 600) if "SITE-UNBOUNDED" in linecache.getline(__file__, k))
    assert line in [s.loc.line for s in fn.fault_sites]


@simt.kernel(block=128)
def strided_pairs(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    base = simt.blockIdx.x * 256
    for j in range(2):
        if base + simt.threadIdx.x * 2 + j < len(a):
            out[i] = a[base + simt.threadIdx.x * 2 + j]


def test_a_guarded_sum_with_products_of_registers_needs_no_check():
    fn = strided_pairs.build(f32v(1000), f32v(1000))
    assert [s.array for s in fn.fault_sites] == []


# ---- neighbours: `k - c` / `k + c` under `k >= lo` and `k < len - d` ---------------------------------

@simt.kernel(domain=2, block=(16, 16, 1), requires=["u.shape == out.shape"])
def five_point(u: simt.Array[f32, 2], out: simt.DisjointSlice[f32, 2]):
    ij = simt.thread.index_2d()
    r = ij[0]
    c = ij[1]
    if r > 0 and r < u.shape[0] - 1 and c > 0 and c < u.shape[1] - 1:
        out[ij] = 0.25 * (u[r - 1, c] + u[r + 1, c] + u[r, c - 1] + u[r, c + 1]) - u[r, c]
    else:
        out[ij] = u[r, c]


def test_stencil_guards_prove_the_neighbour_loads():
    fn = five_point.build(np.ones((9, 7), np.float32), np.ones((9, 7), np.float32))
    assert fn.fault_sites == []
    assert set(checks(fn)) == {"none"}


@simt.kernel(block=128)
def one_sided(u: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    if i > 0 and i <= len(u) - 1:
        out[i] = u[i - 1] + u[i + 1]     # SITE-RIGHT: i <= len - 1 leaves i + 1 == len possible
    if i >= 0 and i < len(u) - 2:
        out[i] = u[i + 2] - u[i - 1]     # SITE-LEFT: i may be 0


def test_neighbours_the_guard_does_not_cover_keep_their_checks():
    fn = one_sided.build(f32v(), f32v())
    right = next(k for k in range(1, 800) if "SITE-RIGHT" in linecache.getline(__file__, k))
    left = next(k for k in range(1, 800) if "SITE-LEFT" in linecache.getline(__file__, k))
    # out[i] is not proven either (no relation between u and out); look at the u sites only
    sites = sorted((s.loc.line, s.loc.col) for s in fn.fault_sites if s.array == "u")
    assert [ln for ln, _ in sites] == [right, left]


# ---- a guarded write the enclosing guard already proves: no second test -----------------------------

def regions(fn: ir.Function) -> list[ir.GuardedRegion]:
    return nodes_of(fn, ir.GuardedRegion)


def test_the_stencil_interior_write_is_proven_and_the_border_write_is_guarded():
    # r < u.shape[0] - 1 and u.shape == out.shape: out[r, c] is in range, the guard could never fail
    fn = five_point.build(np.ones((9, 7), np.float32), np.ones((9, 7), np.float32))
    interior, border = regions(fn)
    assert interior.proven and not border.proven
    stores = nodes_of(fn, ir.Store)
    assert [s.mode for s in stores] == ["guarded", "guarded"]      # still the write at the ThreadIndex
    assert [s.proven for s in stores] == [True, False]


@simt.kernel(domain=2, block=(16, 16, 1))
def five_point_unrelated(u: simt.Array[f32, 2], out: simt.DisjointSlice[f32, 2]):
    ij = simt.thread.index_2d()
    r = ij[0]
    c = ij[1]
    if r > 0 and r < u.shape[0] - 1 and c > 0 and c < u.shape[1] - 1:
        out[ij] = u[r - 1, c] + u[r, c + 1]


@simt.kernel(domain=2, block=(16, 16, 1), requires=["u.shape == out.shape"])
def past_the_end(u: simt.Array[f32, 2], out: simt.DisjointSlice[f32, 2]):
    ij = simt.thread.index_2d()
    r = ij[0]
    c = ij[1]
    if r < u.shape[0] + 1 and c < u.shape[1]:
        out[ij] = 1.0


@simt.kernel(domain=2, block=(16, 16, 1), requires=["len(out) <= len(u)", "u.shape[1] == out.shape[1]"])
def wrong_direction(u: simt.Array[f32, 2], out: simt.DisjointSlice[f32, 2]):
    ij = simt.thread.index_2d()
    r = ij[0]
    c = ij[1]
    if r < u.shape[0] - 1 and c < u.shape[1] - 1:
        out[ij] = 1.0


@simt.kernel(domain=2, block=(16, 16, 1), requires=["u.shape == out.shape"])
def at_most_last(u: simt.Array[f32, 2], out: simt.DisjointSlice[f32, 2]):
    ij = simt.thread.index_2d()
    r = ij[0]
    c = ij[1]
    if r <= u.shape[0] - 1 and c <= u.shape[1] - 1:
        out[ij] = u[r, c]


def test_a_guarded_write_the_facts_do_not_cover_keeps_its_guard():
    a, b = np.ones((9, 7), np.float32), np.ones((9, 7), np.float32)
    assert [r.proven for r in regions(five_point_unrelated.build(a, b))] == [False]   # no relation to out
    assert [r.proven for r in regions(past_the_end.build(a, b))] == [False]           # r may be u.shape[0]
    assert [r.proven for r in regions(wrong_direction.build(a, b))] == [False]        # out may be shorter
    assert [r.proven for r in regions(at_most_last.build(a, b))] == [True]            # r <= len - 1
