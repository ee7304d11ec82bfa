"""A GPT-2 training step whose every kernel runs either as its CUDA C++ original or as its DSL port,
chosen per kernel (issue 30; docs/porting.md, "Porting a GPT-2 training step, kernel by kernel").

    python -m examples.gpt2 --config tiny --steps 3 --simulate          # CPU simulator, every kernel DSL
    python -m examples.gpt2 --config small --steps 20 --dsl layernorm,gelu --graph   # GPU

Modules: config (shapes, the flat parameter layout), arrays (torch / CuPy / NumPy buffers), runtime
(GPU or simulator launches), kernels_cpp / kernels_dsl (the two sides of every op), tile_kernels (the
DSL GEMMs and attention plumbing), registry (the per-kernel switch), model (the step), reference
(plain torch.nn), train (the loop, CUDA graphs), __main__ (the command line).
"""
