"""Run training steps of the GPT-2 step on a chosen mix of C++ and DSL kernels: on the GPU (one
bridge stream for every launch and every torch / CuPy op, optionally the forward, backward and
clipping captured once in a CUDA graph and replayed), or on the CPU simulator (DSL kernels only).
"""
from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from . import registry
from .arrays import array_lib
from .config import GPT2Config
from .model import GPT2, batch
from .runtime import Runtime


class NeedsGpuError(RuntimeError):
    """A run that needs a GPU (C++ kernels, --graph) was asked for on the CPU simulator."""


@dataclass
class StepRecord:
    step: int
    loss: float
    grad_norm: float
    ms: float                                   # wall time of the step, its reads included


def check_runnable(dsl: frozenset[str], simulate: bool, graph: bool) -> None:
    """Refuse before anything is built what cannot run here, naming why."""
    if simulate and dsl != frozenset(registry.NAMES):
        cpp = sorted(set(registry.NAMES) - dsl)
        which = ", ".join(cpp) if len(cpp) <= 4 else f"{len(cpp)} ops"
        raise NeedsGpuError(f"--dsl {registry.describe(dsl)}: the C++ side ({which}) needs a GPU; "
                            f"the CPU simulator runs DSL kernels only (--dsl all)")
    if simulate and graph:
        raise NeedsGpuError("--graph: CUDA graphs need a GPU; drop --graph on the CPU simulator")


def build(cfg: GPT2Config, dsl: frozenset[str], simulate: bool, arrays: str = "torch") -> GPT2:
    """The model on the GPU (`arrays` torch or cupy) or on the simulator (torch CPU or numpy)."""
    lib = array_lib(arrays, "cpu" if simulate else "cuda")
    if not simulate:
        with contextlib.suppress(ImportError):
            import torch
            torch.set_float32_matmul_precision("high")     # cuBLAS in tf32, as the tile GEMMs
    return GPT2(Runtime(lib, cfg, simulate), dsl)


def import_libraries(arrays: str) -> None:
    """Import torch (the C++ side's cuBLAS and SDPA calls, torch arrays) and, for CuPy arrays, CuPy
    before the step's stream is entered: `bridge.use_stream` makes a stream current for the libraries
    already imported, so one imported inside it would run its ops (fills, copies, cuBLAS) on its own
    default stream, unordered with the kernels and outside a CUDA-graph capture."""
    with contextlib.suppress(ImportError):
        import torch  # noqa: F401
    if arrays == "cupy":
        import cupy  # noqa: F401


@contextlib.contextmanager
def torch_pool(pool: Any) -> Iterator[None]:
    """Route this thread's torch allocations to `pool` (None: do nothing). The first (eager) step fills
    it, so the capture's torch temporaries are the pool's cached blocks, private to the graph."""
    if pool is None:
        yield
        return
    import torch
    with torch.cuda.use_mem_pool(pool):
        yield


def train(cfg: GPT2Config, dsl: frozenset[str], steps: int, *, simulate: bool = False, graph: bool = False,
          arrays: str = "torch", on_step: Callable[[StepRecord], None] | None = None) -> list[StepRecord]:
    """`steps` training steps from cfg.seed's weights on batches batch(cfg, 0), batch(cfg, 1), ...;
    the loss and norm of each are read after it (each read waits for the step)."""
    check_runnable(dsl, simulate, graph)
    if simulate:
        return _loop(build(cfg, dsl, True, arrays), steps, None, on_step)
    import bridge
    if not bridge.gpu_available():
        raise NeedsGpuError(f"no GPU ({bridge.gpu_unavailable_reason()}): run on the CPU simulator with "
                            f"--simulate --dsl all")
    import_libraries(arrays)
    stream = bridge.Stream()
    with bridge.use_stream(stream):
        model = build(cfg, dsl, False, arrays)
        return _loop(model, steps, stream if graph else None, on_step)


def _loop(model: GPT2, steps: int, graph_stream: Any, on_step: Callable | None) -> list[StepRecord]:
    records, pool, g = [], None, None
    if graph_stream is not None:
        with contextlib.suppress(ImportError):
            import torch
            pool = torch.cuda.MemPool()
    for step in range(steps):
        t0 = time.perf_counter()
        model.set_batch(*batch(model.cfg, step))
        if g is not None:
            g.replay()
            model.update(step + 1)
        else:
            with torch_pool(pool):
                model.step(step + 1)
        rec = StepRecord(step + 1, model.loss(), model.grad_norm(), (time.perf_counter() - t0) * 1e3)
        records.append(rec)
        if on_step:
            on_step(rec)
        if graph_stream is not None and g is None and step + 1 < steps:
            g = capture(model, graph_stream, pool)
    return records


def capture(model: GPT2, stream: Any, pool: Any = None) -> Any:
    """The forward, backward and clipping of a step as one CUDA graph (nothing runs while capturing).
    AdamW stays outside: its step count t is a kernel scalar, which a graph would freeze, so it is one
    launch after each replay. Call after one eager step (kernels compiled and loaded, scratch made)."""
    import bridge
    stream.synchronize()
    with torch_pool(pool), bridge.capture(stream) as g:
        model.forward()
        model.backward()
        model.clip()
    if pool is not None:
        g.keep_alive(pool)       # the capture's torch temporaries live in it: replays write them
    return g
