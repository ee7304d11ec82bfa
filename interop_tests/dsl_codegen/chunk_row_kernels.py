"""n-D chunk loops (`simt.thread.chunk_2d` / `chunk_3d`): a thread owns a run of the last axis of one
row, for the results, vector-access and slow-path tests. Lines the tests look for carry `# LINE:<name>`."""
from __future__ import annotations

from dsl import f32, i32, simt
from examples.llm_kernels.encoder import encoder_forward


@simt.kernel(domain=2, requires=["x.shape == out.shape", "len(bias) == out.shape[1]"])
def scale_bias_rows(x: simt.Array[f32, 2], bias: simt.Array[f32], out: simt.DisjointSlice[f32, 2], s: f32):
    """out[r, c] = x[r, c] * s + bias[c], four columns a thread."""
    r, ch = simt.thread.chunk_2d(4)
    for c in ch:
        out[r, c] = x[r, c] * s + bias[c]


# GPT-2's encoder (a row of wte chosen by data, a NaN row for a bad id, plus a row of wpe): the port
# itself, so these tests prove what examples/llm_kernels runs
embed = encoder_forward


@simt.kernel(domain=2, requires=["x.shape[1] == out.shape[1]"])
def gather_unproven_row(x: simt.Array[f32, 2], rows: simt.Array[i32], out: simt.DisjointSlice[f32, 2]):
    """x's row comes from data and is not tested: its loads keep a bounds check and stay per element."""
    r, ch = simt.thread.chunk_2d(4)
    if r < len(rows):
        j = rows[r]
        for c in ch:
            out[r, c] = x[j, c]  # LINE:unproven_row


@simt.kernel(domain=2, requires=["x.shape == out.shape"])
def row_changes_in_body(x: simt.Array[f32, 2], out: simt.DisjointSlice[f32, 2]):
    """The row of x's access is a variable the body assigns: it may differ between the elements."""
    r, ch = simt.thread.chunk_2d(2)
    j = r
    for c in ch:
        out[r, c] = x[j, c]  # LINE:changing_row
        j = 0


@simt.kernel(domain=2, requires=["x.shape[1] == out.shape[1]"])
def column_sums_in_rows(x: simt.Array[f32, 2], out: simt.DisjointSlice[f32, 2]):
    """x's row is an inner loop's variable: it changes within each element, so x's loads stay inside."""
    r, ch = simt.thread.chunk_2d(4)
    for c in ch:
        acc = f32(0.0)
        for j in range(x.shape[0]):
            acc += x[j, c]  # LINE:inner_loop_row
        out[r, c] = acc


def marker_line(name: str) -> int:
    with open(__file__) as f:
        for k, line in enumerate(f, 1):
            if line.rstrip().endswith(f"# LINE:{name}"):
                return k
    raise LookupError(name)
