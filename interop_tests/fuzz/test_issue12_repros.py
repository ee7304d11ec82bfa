"""Every reproducer of issue 12 ("Keep the safety promise"), and every crash the fuzz suite found beyond
it, as a regression test. Each runs in its own interpreter, so a segfault or an LLVM abort fails the
test (naming the exit status) instead of killing the runner, and each pins the TYPED outcome the
issue asks for: the exception class and the key words of its message.

The snippet prints one line `REPORT {json}`: the stage that raised (e.g. "def" for a decorator,
"compile" for .ptx()), the exception's class and MRO, its message, and the class of its cause.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from interop_tests.fuzz.harness import REPO

IN_CI = os.environ.get("CI", "").lower() == "true"

PRELUDE = r'''
import json, os, sys, tempfile, types
def report(stage, exc=None, **extra):
    d = {"stage": stage, "raised": None, "mro": [], "msg": "", "cause": None}
    if exc is not None:
        d.update(raised=type(exc).__name__, mro=[c.__name__ for c in type(exc).__mro__], msg=str(exc),
                 cause=type(exc.__cause__ or exc.__context__).__name__ if (exc.__cause__ or exc.__context__) else None)
        for k in ("file", "line"):
            if hasattr(exc, k):
                d[k] = getattr(exc, k)
    d.update(extra)
    print("REPORT " + json.dumps(d, default=repr), flush=True)

def attempt(stage, fn, **extra):
    """Run fn; report and exit on an exception, else return its result."""
    try:
        return fn()
    except BaseException as exc:
        report(stage, exc, **extra)
        sys.exit(0)

def kernel_module(source):
    """Write `source` to a file and execute it (the DSL reads kernels from files)."""
    path = os.path.join(tempfile.mkdtemp(), "repro_kernel.py")
    with open(path, "w") as f:
        f.write(source)
    module = types.ModuleType("repro_kernel")
    module.__file__ = path
    exec(compile(source, path, "exec"), module.__dict__)
    return module, path
'''


def run_snippet(code: str, timeout: float = 180) -> dict:
    """Run `code` (after PRELUDE) in a fresh interpreter; the report of its one REPORT line."""
    env = dict(os.environ, KB_CACHE="0", PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-X", "faulthandler", "-c", PRELUDE + textwrap.dedent(code)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-25:])
    if proc.returncode != 0:
        how = f"signal {-proc.returncode}" if proc.returncode < 0 else f"exit status {proc.returncode}"
        pytest.fail(f"the reproducer killed the interpreter ({how}) instead of raising a typed error:\n{tail}")
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("REPORT ")]
    assert lines, f"the reproducer printed no report:\n{tail}"
    return json.loads(lines[-1][len("REPORT "):])


def expect(rep: dict, classes: tuple[str, ...], stage: str | None = None, words: tuple[str, ...] = ()) -> None:
    assert rep["raised"] is not None, f"nothing was raised (stage {rep['stage']!r}): {rep}"
    assert any(c in rep["mro"] for c in classes), \
        f"expected {' or '.join(classes)}, got {rep['raised']} at stage {rep['stage']!r}: {rep['msg'][:600]}"
    if stage is not None:
        assert rep["stage"] == stage, f"raised at stage {rep['stage']!r}, expected {stage!r}: {rep['msg'][:600]}"
    for w in words:
        assert w in rep["msg"], f"{w!r} not in the {rep['raised']} message: {rep['msg'][:600]}"


def expect_at_the_def(rep: dict, words: tuple[str, ...] = (), lines: tuple[int, ...] = (2, 3)) -> None:
    """A DslCompileError raised by the decorator, pointing at the decorator or def line of the file."""
    expect(rep, ("DslCompileError",), stage="def", words=words)
    assert rep.get("file", "").endswith("repro_kernel.py") and rep.get("line") in lines, \
        f"the error points at {rep.get('file')}:{rep.get('line')}, not the def (lines {lines}): {rep['msg']}"


# ===================================================================================== intake
def test_cai_typestr_with_a_lone_surrogate_is_a_typed_error_not_a_segfault():
    rep = run_snippet('''
        import bridge
        class X: __cuda_array_interface__ = {"version": 3, "shape": (4,), "typestr": "<\\udcff", "data": (4096, False)}
        attempt("asarray", lambda: bridge.asarray(X()))
        report("returned")
    ''')
    expect(rep, ("DTypeError", "TypeError", "ValueError"), stage="asarray", words=("typestr",))


def test_cai_readonly_flag_whose_bool_raises_is_not_a_system_error():
    rep = run_snippet('''
        import bridge
        class Boom(Exception): pass
        class Flag:
            def __bool__(self): raise Boom("no truth value")
        class X: __cuda_array_interface__ = {"version": 3, "shape": (4,), "typestr": "<f4", "data": (4096, Flag())}
        attempt("asarray", lambda: bridge.asarray(X()))
        report("returned")
    ''')
    assert rep["raised"] != "SystemError", rep
    if rep["raised"] != "Boom":     # the flag's own error, or a typed refusal caused by it
        expect(rep, ("TypeError", "ValueError"), stage="asarray")
        assert rep["cause"] == "Boom" or "read" in rep["msg"], rep


def test_dlpack_tensor_of_shape_2_62_squared_is_a_layout_error():
    rep = run_snippet('''
        import bridge
        from interop_tests.fuzz import t_intake as T
        spec = {"versioned": True, "name": None, "version": (1, 1), "flags": 0, "ndim": 2, "dtype": (2, 32, 1),
                "device": (1, 0), "shape": [2**62, 2**62], "strides": None, "byte_offset": 0, "data": T.PTR,
                "deleter": True, "dlpack_device": "match", "legacy_producer": False}
        obj, _ = T.build(("capsule", spec))
        attempt("asarray", lambda: bridge.asarray(obj))
        report("returned")
    ''')
    expect(rep, ("LayoutError",), stage="asarray", words=("4611686018427387904",))


NUMPY_REFUSED = {
    "big_endian": ("np.ones(10, '>f4')", "DTypeError", ("argument 'a' (#0)",)),
    "strides_not_a_multiple_of_the_itemsize": ("np.ndarray((10,), np.float32, buffer=bytearray(64), strides=(6,))",
                                               "LayoutError", ("argument 'a' (#0)",)),
}


@pytest.mark.parametrize("case", sorted(NUMPY_REFUSED))
def test_numpy_arrays_numpys_dlpack_refuses_get_typed_errors_from_simulate(case):
    make, cls, words = NUMPY_REFUSED[case]
    rep = run_snippet(f'''
        import numpy as np
        from interop_tests.fuzz.fuzz_kernels import scale
        a, out = {make}, np.full(10, -7, np.float32)
        attempt("simulate", lambda: scale.simulate(a, out, np.float32(2)), untouched=bool((out == -7).all()))
        report("returned")
    ''')
    expect(rep, (cls,), stage="simulate", words=("scale", *words))
    assert rep["untouched"], "the refused launch wrote its output"


def test_a_writable_argument_with_a_zero_stride_is_an_aliasing_error():
    rep = run_snippet('''
        import numpy as np
        from interop_tests.fuzz.fuzz_kernels import scale
        out = np.lib.stride_tricks.as_strided(np.full(1, -7, np.float32), shape=(10,), strides=(0,))
        attempt("simulate", lambda: scale.simulate(np.ones(10, np.float32), out, np.float32(2)),
                untouched=bool(out[0] == -7))
        report("returned")
    ''')
    expect(rep, ("AliasingError",), stage="simulate", words=("argument 'out' (#1)",))
    assert rep["untouched"]


# ===================================================================================== launch configuration
LAUNCH_CONFIG = {
    "block_with_four_dims": ("block=(64, 1, 1, 1)", "BlockSizeError"),
    "float_block": ("block=64.0", "BlockSizeError"),
    "negative_shared_mem": ("shared_mem=-1", "SharedMemoryError"),
    "block_element_whose_index_raises": ("block=(Dim(), 1, 1)", "BlockSizeError"),
    "grid_element_whose_index_raises": ("grid=(Dim(),)", "GridSizeError"),
}


@pytest.mark.parametrize("case", sorted(LAUNCH_CONFIG))
def test_bad_launch_configuration_on_a_validate_only_launch_is_the_contracts_error(case):
    config, cls = LAUNCH_CONFIG[case]
    rep = run_snippet(f'''
        import numpy as np
        from interop_tests.fuzz.fuzz_kernels import scale
        class Dim:
            def __index__(self): raise ZeroDivisionError("no index")
        a, out = np.ones(10, np.float32), np.full(10, -7, np.float32)
        attempt("simulate", lambda: scale.simulate(a, out, np.float32(2), {config}),
                untouched=bool((out == -7).all()))
        report("returned")
    ''')
    expect(rep, (cls,), stage="simulate", words=("scale",))
    assert rep["untouched"]


def test_a_block_sum_without_grid_is_refused_naming_the_kernel_and_grid():
    rep = run_snippet('''
        import numpy as np
        from interop_tests.fuzz.fuzz_kernels import block_sum
        a, total = np.ones(100000, np.float32), np.zeros(1, np.float32)
        attempt("simulate", lambda: block_sum.simulate(a, total), total=float(total[0]))
        report("returned", total=float(total[0]))
    ''')
    expect(rep, ("GridSizeError",), stage="simulate", words=("block_sum", "grid="))
    assert rep["total"] == 0.0


# ===================================================================================== contracts
def test_a_long_left_deep_relation_is_a_definition_error_at_parse():
    rep = run_snippet('''
        from bridge import _native
        text = ('{"kernel":"k","args":[{"name":"a","kind":"array","dtype":"f32","ndim":1}],'
                '"requires":["len(a)' + ' + 0' * 20000 + ' == len(a)"]}')
        c = attempt("parse", lambda: _native.Contract(text))
        attempt("validate", lambda: _native.validate(c, [_native.ArrayDesc(4096, [10])], grid=1, block=1))
        report("returned")
    ''')
    expect(rep, ("ContractDefinitionError",), stage="parse", words=("requires[0]",))


def test_a_contract_that_is_not_json_text_is_a_definition_error_not_a_unicode_error():
    rep = run_snippet('''
        from bridge import _native
        attempt("parse", lambda: _native.Contract("\\u00e9"))
        report("returned")
    ''')
    expect(rep, ("ContractDefinitionError",), stage="parse", words=("invalid contract",))


# ===================================================================================== DSL
KERNEL = '''from dsl import simt, f32, i32, tile
@simt.kernel({options})
def k(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    out[i] = a[i]
'''
BAD_OPTIONS = {   # (decorator options, a word the message must contain)
    "block_0": ("block=(0, 1, 1)", "block"),
    "block_negative_zero": ("block=(128, -0.0, 1)", "block"),
    "block_negative": ("block=(-1, 1, 1)", "block"),
    "block_2_64": ("block=(2**64, 1, 1)", "block"),
    "block_2048": ("block=(2048, 1, 1)", "block"),
    "launch_bounds_negative": ("launch_bounds=-1", "launch_bounds"),
    "launch_bounds_2_40": ("launch_bounds=2**40", "launch_bounds"),
    "launch_bounds_0": ("launch_bounds=0", "launch_bounds"),
    "min_cc_2000": ("min_cc=2000", "min_cc"),
    "shared_mem_negative": ("shared_mem=-5", "shared_mem"),
    "shared_mem_max_without_size": ("shared_mem=('max',)", "shared_mem"),   # found by the fuzz suite
    "block_str": ("block='x'", "block"),                                    # found by the fuzz suite
}


@pytest.mark.parametrize("case", sorted(BAD_OPTIONS))
def test_bad_decorator_options_are_a_compile_error_at_the_def(case):
    options, word = BAD_OPTIONS[case]
    rep = run_snippet(f'''
        import numpy as np
        m, path = attempt("def", lambda: kernel_module({KERNEL.format(options=options)!r}))
        x = np.zeros(10, np.float32)
        attempt("compile", lambda: m.k.ptx(x, x.copy(), arch="sm_80"))
        report("returned")
    ''')
    expect_at_the_def(rep, words=(word,))


def test_a_long_left_deep_requires_relation_is_a_compile_error_at_the_def():
    options = "block=128, requires=['len(a)' + ' + 0' * 20000 + ' == len(out)']"
    rep = run_snippet(f'''
        import numpy as np
        m, path = attempt("def", lambda: kernel_module({KERNEL.format(options=options)!r}))
        x = np.zeros(10, np.float32)
        attempt("compile", lambda: m.k.ptx(x, x.copy(), arch="sm_80"))
        report("returned")
    ''')
    expect_at_the_def(rep, words=("requires",))


BODY_ERRORS = {   # kernel body lines (after `i = ...`), lines the error may point at, a message word
    "literal_past_i64_then_augmented": (["j = 9223372036854775808", "j += 1"], (5, 6), "9223372036854775808"),
    "int_cast_of_an_infinite_literal": (["u = i32(1e309)"], (5,), "i32"),        # found by the fuzz suite
}


@pytest.mark.parametrize("case", sorted(BODY_ERRORS))
def test_front_end_internal_errors_are_compile_errors_at_the_line(case):
    body, lines, word = BODY_ERRORS[case]
    source = ("from dsl import simt, f32, i32\n@simt.kernel(block=128)\n"
              "def k(a: simt.Array[f32], out: simt.DisjointSlice[f32]):\n    i = simt.thread.index_1d()\n"
              + "".join(f"    {ln}\n" for ln in body) + "    out[i] = a[i]\n")
    rep = run_snippet(f'''
        import numpy as np
        m, path = attempt("def", lambda: kernel_module({source!r}))
        x = np.zeros(10, np.float32)
        attempt("compile", lambda: m.k.ptx(x, x.copy(), arch="sm_80"))
        report("returned")
    ''')
    expect(rep, ("DslCompileError",), stage="compile", words=(word,))
    assert rep.get("line") in lines, f"points at line {rep.get('line')}, expected one of {lines}: {rep['msg']}"


def test_tile_num_warps_that_is_not_a_power_of_two_is_refused_at_the_def():
    """Found by the fuzz suite: num_warps=3 is accepted and fails at compile with a ValueError."""
    source = ("from dsl import tile, f32\n@tile.kernel(num_warps=3)\n"
              "def k(a: tile.Array[f32], out: tile.Partition[f32]):\n"
              "    out.store(tile.load(a, tile.bid(0), out.tile_shape))\n")
    rep = run_snippet(f'''
        import numpy as np
        from dsl import tile
        m, path = attempt("def", lambda: kernel_module({source!r}))
        x = np.zeros(100, np.float32)
        attempt("compile", lambda: m.k.ptx(x, tile.partition(x.copy(), (64,)), arch="sm_80"))
        report("returned")
    ''')
    expect_at_the_def(rep, words=("num_warps",))


# ===================================================================================== found beyond the issue
def test_a_contract_text_with_a_lone_surrogate_is_a_definition_error():
    """Found by the fuzz suite: a Python str that is not valid UTF-8 is refused by pybind11's argument
    conversion with a TypeError ('incompatible constructor arguments') instead of a contract error."""
    rep = run_snippet('''
        from bridge import _native
        attempt("parse", lambda: _native.Contract('{"kernel": "k\\udcff", "args": []}'))
        report("returned")
    ''')
    expect(rep, ("ContractDefinitionError",), stage="parse")


VALIDATE_CONFIG = {   # found by the fuzz suite on bridge._native.validate
    "empty_grid_tuple": ("grid=()", "GridSizeError"),
    "float_shared_memory": ("smem=1.5", "SharedMemoryError"),
}


@pytest.mark.parametrize("case", sorted(VALIDATE_CONFIG))
def test_native_validate_refuses_bad_configuration_with_the_contracts_errors(case):
    config, cls = VALIDATE_CONFIG[case]
    rep = run_snippet(f'''
        from bridge import _native
        c = _native.Contract('{{"kernel":"k","args":[{{"name":"a","kind":"array","dtype":"f32","ndim":1}}]}}')
        attempt("validate", lambda: _native.validate(c, [_native.ArrayDesc(4096, [10])], {config}))
        report("returned")
    ''')
    expect(rep, (cls,), stage="validate")


# ===================================================================================== module bytes
def _module_repro(mutate: str) -> dict:
    return run_snippet(f'''
        import struct
        from interop_tests.fuzz import t_modules as M
        from bridge.fatbin import embedded_contracts
        bases = M.bases()
        if "nvcc.cubin" not in bases:
            report("skipped")
            sys.exit(0)
        cubin = bytearray(bases["nvcc.cubin"].read_bytes())
        original = embedded_contracts(bytes(cubin))
{textwrap.indent(textwrap.dedent(mutate), " " * 8)}
        got = attempt("read", lambda: embedded_contracts(bytes(data)))
        report("returned", got=got, original=original)
    ''')


def _skip_without_cubin(rep: dict) -> None:
    if rep["stage"] == "skipped":
        if IN_CI:
            pytest.fail("nvcc is needed in CI (CI=true) to build the cubin these reproducers mutate")
        pytest.skip("no nvcc: no cubin to mutate")


MODULE_BYTES = {   # found by the fuzz suite; the issue (section 3) lists the exception types
    "truncated_elf_header": "data = cubin[:15]",
    "invalid_utf8_in_the_contract": "at = cubin.index(b'{\"version\"')\ncubin[at + 2] = 0xFF\ndata = cubin",
    "symbol_table_linked_to_a_missing_section": (
        "shoff = struct.unpack_from('<Q', cubin, 0x28)[0]\nshentsize, shnum = struct.unpack_from('<HH', cubin, 0x3A)\n"
        "for i in range(shnum):\n"
        "    h = shoff + i * shentsize\n"
        "    if struct.unpack_from('<I', cubin, h + 4)[0] == 2:\n"
        "        struct.pack_into('<I', cubin, h + 40, 0xFFFF)\n"
        "data = cubin"),
}


@pytest.mark.parametrize("case", sorted(MODULE_BYTES))
def test_malformed_cubin_bytes_are_module_format_errors(case):
    rep = _module_repro(MODULE_BYTES[case])
    _skip_without_cubin(rep)
    expect(rep, ("ModuleFormatError", "ContractDefinitionError"), stage="read")


def test_a_flipped_digit_in_an_embedded_contract_never_gives_a_different_contract():
    rep = _module_repro("""
        at = cubin.index(b'"exact":[64,')
        cubin[at + 10] = ord('5')                 # block.exact 64 -> 65: still valid JSON and a valid contract
        data = cubin
    """)
    _skip_without_cubin(rep)
    if rep["raised"] is None:
        assert rep["got"].get("fill") in (None, rep["original"]["fill"]), \
            f"corrupt bytes gave a different contract: {rep['got'].get('fill')}"
    else:
        expect(rep, ("ModuleFormatError", "ContractDefinitionError"), stage="read", words=("fill",))


def test_an_lz4_entry_that_expands_past_its_declared_size_is_refused_without_allocating_it():
    rep = run_snippet('''
        import tracemalloc
        import bridge
        from interop_tests.fuzz import t_modules as M
        from bridge.fatbin import embedded_contracts
        names = [n for n in M.bases() if n.endswith(".fatbin")]
        if not names:
            report("skipped")
            sys.exit(0)
        data = bytes(M._lz4_bomb(bytearray(M.bases()[names[0]].read_bytes()), 0, 1_000_000))  # 4096 -> ~255 MB
        tracemalloc.start()
        try:
            embedded_contracts(data)
            exc = None
        except BaseException as e:   # noqa: BLE001
            exc = e
        peak = tracemalloc.get_traced_memory()[1] / 2**20
        report("read" if exc else "returned", exc, peak_mb=peak)
    ''')
    _skip_without_cubin(rep)
    expect(rep, ("ModuleFormatError",), stage="read")
    assert rep["peak_mb"] < 32, f"the reader allocated {rep['peak_mb']:.0f} MB for a 4096-byte entry"
