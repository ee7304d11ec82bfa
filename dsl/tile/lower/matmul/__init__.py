"""Matrix products: the portable FMA path (portable.py), mma.sync GEMM loops (mma_sync.py), products
outside GEMM loops on the tensor cores (products.py, wgmma_products.py), sm_90 warpgroup MMA (wgmma.py)
fed by TMA (tma.py), warp specialisation (warp_specialised.py), operand staging (operands.py, stages.py,
transposing.py: tf32 operands that are not K-major, through registers), and the TMA rings of tile loops'
products (ring.py; ring_ws.py: their producer warpgroup; overlap.py: the last product behind the next
iteration's first)."""
