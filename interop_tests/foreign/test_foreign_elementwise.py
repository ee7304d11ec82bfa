"""CuPy ElementwiseKernels wrapped by generating our own kernel (no GPU, no CuPy needed): CuPy's parameter
syntax and placeholder typing, the generated source compiled by NVRTC or nvcc for sm_80 and sm_90 and its
parameters checked against the contract, the contract as the one validator runs it (described arrays),
and the refusals: ReductionKernel, broadcasting, unbound or conflicting placeholders, all-raw kernels."""
from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

from bridge import _native
from bridge.errors import AliasingError, DTypeError, ForeignKernelError, LayoutError, NdimError, ShapeRelationError
from bridge.foreign import build_elementwise, elementwise_spec
from bridge.foreign.cubin import cubin_params
from bridge.foreign.elementwise import elementwise_contract, elementwise_source
from bridge.foreign.elementwise_params import parse_params, resolve, spec_of
from interop_tests.contract.contract_support import attrs, desc, limits

AXPY = elementwise_spec("T x, T a", "T y", "y = a * x + y", "axpy")
GATHER = elementwise_spec("raw T src, int32 shift", "T out", "out = src[(i + shift) % src.size()] * (T)_ind.size()",
                          "gather")


def info(name, ctype, dtype=None, raw=False, is_const=True):
    """What cupy._core._kernel.ParameterInfo holds."""
    return SimpleNamespace(name=name, ctype=ctype, dtype=None if dtype is None else np.dtype(dtype), raw=raw,
                           is_const=is_const)


class ElementwiseKernelStandIn:
    """The attributes of cupy.ElementwiseKernel the adapter reads."""

    def __init__(self, in_params, out_params, operation, name="kernel", preamble="", **kwargs):
        self.in_params, self.out_params, self.operation = in_params, out_params, operation
        self.name, self.preamble, self.kwargs = name, preamble, kwargs


def test_cupys_parameter_syntax_is_read():
    x, y, a = parse_params("T x, raw T y, float32 a", is_out=False)
    assert (x.name, x.ctype, x.dtype, x.raw) == ("x", "T", None, False)
    assert (y.name, y.raw) == ("y", True)
    assert (a.ctype, a.dtype) == ("float32", "f32")
    with pytest.raises(ForeignKernelError, match="'restrict T z': expected"):
        parse_params("restrict T z", is_out=False)
    with pytest.raises(ForeignKernelError, match="parameter 'i': the name is the loop's own"):
        elementwise_spec("T i", "T y", "y = i")
    with pytest.raises(ForeignKernelError, match="complex needs CuPy's own headers"):
        parse_params("complex64 z", is_out=False)
    with pytest.raises(ForeignKernelError, match="parameter 'w': a `_non_const` input is written through"):
        parse_params("_non_const T w", is_out=False)
    assert parse_params("_non_const T w", is_out=True)[0].is_out


def test_a_cupy_elementwise_kernel_object_is_read_and_a_reduction_kernel_refused():
    ek = ElementwiseKernelStandIn((info("x", "T"), info("s", "float32", "float32")), (info("y", "T", is_const=False),),
                                  "y = s * x", "scale", preamble="// p", loop_prep="int unused = 0",
                                  options=("-DFOO=1",))
    spec = spec_of(ek)
    assert [(p.name, p.dtype, p.is_out) for p in spec.params] == [("x", None, False), ("s", "f32", False),
                                                                  ("y", None, True)]
    assert (spec.name, spec.preamble, spec.loop_prep, spec.options) == ("scale", "// p", "int unused = 0",
                                                                        ("-DFOO=1",))
    red = SimpleNamespace(name="total", reduce_expr="a + b", map_expr="x", in_params=(), out_params=(),
                          operation="")
    with pytest.raises(ForeignKernelError, match="total: cupy.ReductionKernel is not supported"):
        spec_of(red)
    with pytest.raises(ForeignKernelError, match="ReductionKernel"):
        import bridge.foreign
        bridge.foreign.cupy(red)                 # refused before any device work
    with pytest.raises(ForeignKernelError, match="'x': a `_non_const` input"):
        spec_of(ElementwiseKernelStandIn((info("x", "T", is_const=False),), (info("y", "T", is_const=False),), "y = x"))
    with pytest.raises(ForeignKernelError, match=r"options \['size'\]"):
        spec_of(ElementwiseKernelStandIn((), (info("y", "T", is_const=False),), "y = 0", size=3))


def test_placeholders_are_bound_by_arrays_and_numpy_scalars():
    r = resolve(AXPY, (np.zeros(5, np.float64), 2.0, np.zeros(5, np.float64)))
    assert [(p.name, p.dtype, p.is_array, p.ndim) for p in r] == [("x", "f64", True, 1), ("a", "f64", False, 0),
                                                                  ("y", "f64", True, 1)]
    r = resolve(AXPY, types={"T": "float16"}, scalars=("a",), ndim=3)
    assert [(p.dtype, p.is_array, p.ndim) for p in r] == [("f16", True, 3), ("f16", False, 0), ("f16", True, 3)]
    with pytest.raises(ForeignKernelError, match=r"'a': placeholder T is f64 \(from 'x'\), given f32"):
        resolve(AXPY, (np.zeros(5), np.float32(2), np.zeros(5)))
    with pytest.raises(ForeignKernelError, match=r"'x': placeholder T is bound by no array.*types=\{'T'"):
        resolve(AXPY, scalars=("a",))
    with pytest.raises(ForeignKernelError, match="'y': shape \\(5, 1\\).*broadcasting is not supported"):
        resolve(AXPY, (np.zeros(5), 2.0, np.zeros((5, 1))))
    with pytest.raises(ForeignKernelError, match="2 example argument\\(s\\) for 3 parameters"):
        resolve(AXPY, (np.zeros(5), 2.0))
    with pytest.raises(ForeignKernelError, match="scalars: 'y' is not an input"):
        resolve(AXPY, types={"T": "f32"}, scalars=("y",))
    with pytest.raises(ForeignKernelError, match="every array is raw"):
        build_elementwise(elementwise_spec("raw T x", "raw T y", "y[i] = x[i]"), types={"T": "f32"}, arch=90)


def test_the_contract_reads_inputs_writes_outputs_and_derives_the_grid_from_the_output():
    r = resolve(AXPY, types={"T": "float32"}, scalars=("a",), ndim=2)
    d = json.loads(elementwise_contract(AXPY, r, min_cc=90).to_json())
    assert [(a["name"], a["kind"], a.get("access"), a.get("abi"), a.get("ndim"), a.get("layout")) for a in d["args"]] == [
        ("x", "array", "read", "pointer", 2, "C"), ("a", "scalar", None, None, None, None),
        ("y", "array", "write", "view", 2, "C")]
    assert d["requires"] == ["x.shape == y.shape"] and d["block"] == {"exact": [128, 1, 1]}
    assert d["grid_from"] == {"arg": "y", "tile": [1, 128], "max_blocks_per_sm": 16}
    d = json.loads(elementwise_contract(AXPY, r, block_size=256, access={"y": "readwrite"}).to_json())
    assert d["args"][2]["access"] == "readwrite" and d["grid_from"]["max_blocks_per_sm"] == 8
    with pytest.raises(ForeignKernelError, match="access: 'x'"):
        elementwise_contract(AXPY, r, access={"x": "readwrite"})


def test_the_operation_sees_cupys_names():
    r = resolve(GATHER, (np.zeros((3, 4), np.float32), 1, np.zeros(7, np.float32)))
    code = elementwise_source(GATHER, r)
    assert "typedef float T;" in code and 'extern "C" __global__ void __launch_bounds__(128) gather(' in code
    assert "const _kb_raw_array<const T, 2> src(" in code        # raw: CuPy's CArray surface
    assert "T &out = _raw_out[i];" in code and "_ind.set(i);" in code
    assert "_ind.size_ = _kb_out_e0;" in code


@pytest.mark.slow
@pytest.mark.parametrize("arch", [80, 90])
def test_generated_source_compiles_and_its_parameters_are_what_the_contract_packs(arch):
    b = build_elementwise(AXPY, np.zeros(9, np.float32), np.float32(2), np.zeros(9, np.float32), arch=arch)
    assert [p.size for p in cubin_params(b.image, "axpy")] == [8, 4, 8, 8, 8]    # x; a; y, extent, stride
    g = build_elementwise(GATHER, np.zeros((3, 4), np.float64), 1, np.zeros((2, 5), np.float64), arch=arch)
    assert [p.size for p in cubin_params(g.image, "gather")] == [8, 8, 8, 8, 8, 4, 8, 8, 8, 8, 8]
    assert g.info["types"] == {"src": "f64", "shift": "i32", "out": "f64"} and g.info["arch"] == arch
    half = elementwise_spec("T x, raw U w, float32 s", "T y, U z", "y = (T)(s * (float)x); z = w[0]", "halves",
                            loop_prep="const float unused = 1.0f", after_loop="(void)unused")
    h = build_elementwise(half, types={"T": "float16", "U": "int64"}, scalars=("s",), ndim={"x": 2, "y": 2, "z": 2},
                          arch=arch)
    assert json.loads(h.contract.to_json())["args"][0]["dtype"] == "f16"
    h.check()


@pytest.mark.slow
def test_an_operation_that_does_not_compile_is_a_foreign_kernel_error_with_the_compilers_message():
    bad = elementwise_spec("T x", "T y", "y = undefined_function(x)", "broken")
    with pytest.raises(ForeignKernelError, match="undefined_function"):
        build_elementwise(bad, types={"T": "f32"}, arch=90)


@pytest.mark.slow
def test_the_validator_runs_the_contract_same_shape_dtype_aliasing_layout():
    b = build_elementwise(AXPY, types={"T": "float32"}, scalars=("a",), ndim=1, arch=90)
    c = b.contract.native()
    n = 1_000_003
    x, y = desc((n,)), desc((n,), ptr=0x7F10_0000_0000)
    grid, block = _native.validate(c, [x, 2.0, y], limits=limits(), attrs=attrs())
    assert tuple(block) == (128, 1, 1) and tuple(grid) == (16 * 132, 1, 1)     # capped; the loop strides
    grid, _ = _native.validate(c, [desc((1000,)), 2.0, desc((1000,), ptr=0x7F10_0000_0000)], limits=limits(),
                               attrs=attrs())
    assert tuple(grid) == (8, 1, 1)
    with pytest.raises(ShapeRelationError, match="x.shape == y.shape"):
        _native.validate(c, [desc((n - 1,)), 2.0, y], limits=limits(), attrs=attrs())
    with pytest.raises(DTypeError):
        _native.validate(c, [desc((n,), "f64"), 2.0, y], limits=limits(), attrs=attrs())
    with pytest.raises(AliasingError):
        _native.validate(c, [y, 2.0, y], limits=limits(), attrs=attrs())
    with pytest.raises(NdimError):
        _native.validate(c, [desc((n, 1)), 2.0, y], limits=limits(), attrs=attrs())
    with pytest.raises(LayoutError):
        _native.validate(c, [desc((n // 2,), strides=(2,)), 2.0, desc((n // 2,), ptr=0x7F10_0000_0000)],
                         limits=limits(), attrs=attrs())
