"""The README quickstart (its refused launch caught and printed). Needs a GPU."""
import numpy as np
import bridge
from dsl import f32, simt

@simt.kernel(block=256, requires=["len(a) == len(out)", "len(b) == len(out)"])
def vecadd(a: simt.Array[f32], b: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()          # a ThreadIndex: the only index a DisjointSlice accepts
    out[i] = a[i] + b[i]                # guarded: threads past len(out) do nothing

n = 1_000_003
a = bridge.from_host(np.random.rand(n).astype(np.float32))
b = bridge.from_host(np.random.rand(n).astype(np.float32))
out = bridge.empty((n,), "float32")
vecadd(a, b, out)                       # grid derived from the contract and len(out), validated first
assert np.allclose(out.to_host(), a.to_host() + b.to_host())

try:
    vecadd(a, b, bridge.empty((n,), "float64"))   # bridge.DTypeError: vecadd: argument 'out' (#2): expected float32 ...
except bridge.DTypeError as e:
    print("refused:", e)
print("PASS")
