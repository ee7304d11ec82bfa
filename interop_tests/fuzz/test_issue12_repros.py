"""Every reproducer of issue 12 ("Keep the safety promise"), and every crash the fuzz suite found beyond
it, as a regression test that pins the TYPED outcome the issue asks for: the exception class and the
key words of its message.

Each reproducer is a snippet run in a child interpreter, never in the test runner: a segfault or an
LLVM abort fails exactly that test, naming the exit status. To keep the suite fast the snippets of
one test process share a child until one of them kills it; the next snippet then gets a fresh child
(`ReproChild`). With `KB_REPRO_ISOLATED=1` every snippet gets an interpreter of its own.

A snippet reports once (`report(...)`): the stage that raised (e.g. "def" for a decorator, "compile"
for .ptx()), the exception's class and MRO, its message, and the class of its cause.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from interop_tests.cpp.lz4_support import require_lz4_package
from interop_tests.required_tools import missing

from interop_tests.fuzz.harness import REPO, _FrameReader, write_frame


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
    _emit(json.loads(json.dumps(d, default=repr)))

def attempt(stage, fn, **extra):
    """Run fn; report and end the snippet on an exception, else return its result."""
    try:
        return fn()
    except BaseException as exc:
        report(stage, exc, **extra)
        sys.exit(0)

def kernel_module(source):
    """Write `source` to a file and execute it (the DSL reads kernels from files)."""
    path = os.path.join(tempfile.mkdtemp(dir=os.environ.get("KB_REPRO_TMP")), "repro_kernel.py")
    with open(path, "w") as f:
        f.write(source)
    module = types.ModuleType("repro_kernel")
    module.__file__ = path
    exec(compile(source, path, "exec"), module.__dict__)
    return module, path
'''

# The child: runs (name, code) requests from stdin, each in a fresh namespace; one result frame each.
DRIVER = r'''
import os, sys
from interop_tests.fuzz.harness import read_frame, write_frame
proto = os.fdopen(os.dup(1), "wb")
os.dup2(2, 1)
sys.stdout = sys.stderr
write_frame(proto, ("ready",))
while (msg := read_frame(sys.stdin.buffer)) is not None:
    name, code = msg
    print("START " + name, file=sys.stderr, flush=True)
    box = {}
    try:
        exec(compile(code, "<repro " + name + ">", "exec"), {"__name__": "__repro__", "_emit": box.update})
    except SystemExit:
        pass
    except BaseException as exc:   # the snippet itself broke outside attempt(): say so
        box = {"stage": "snippet", "raised": type(exc).__name__, "mro": [c.__name__ for c in type(exc).__mro__],
               "msg": str(exc), "cause": None}
    write_frame(proto, ("done", name, box or {"stage": "no report", "raised": None, "mro": [], "msg": ""}))
'''

SNIPPETS: dict[str, str] = {}


def snippet(name: str, code: str) -> str:
    SNIPPETS[name] = PRELUDE + textwrap.dedent(code)
    return name


class ReproChild:
    """A child interpreter that runs snippets on request and is replaced when one kills it."""

    def __init__(self, timeout: float = 300) -> None:
        self.timeout, self.proc, self.reader = timeout, None, None
        self.tmp = Path(tempfile.mkdtemp(prefix="kb_repro_"))      # the child's files; removed at the end
        self.stderr_path = self.tmp / "child.stderr"
        self.isolated = os.environ.get("KB_REPRO_ISOLATED") == "1"

    def _start(self) -> None:
        env = dict(os.environ, KB_CACHE="0", PYTHONPATH=str(REPO), KB_REPRO_TMP=str(self.tmp))
        self.stderr = open(self.stderr_path, "w+b")
        self.proc = subprocess.Popen([sys.executable, "-X", "faulthandler", "-c", DRIVER], cwd=REPO, env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr)
        self.reader = _FrameReader(self.proc.stdout.fileno())
        status, msg = self.reader.next(120)
        assert status == "frame" and msg == ("ready",), f"the reproducer child did not start: {self._tail('')}"

    def _tail(self, name: str) -> str:
        text = self.stderr_path.read_bytes().decode("utf-8", errors="replace")
        return "\n".join(text.split(f"START {name}\n")[-1].splitlines()[-25:])

    def run(self, name: str) -> dict:
        if self.proc is None:
            self._start()
        write_frame(self.proc.stdin, (name, SNIPPETS[name]))
        status, msg = self.reader.next(self.timeout)
        if status == "frame":
            if self.isolated:
                self.close()
            return msg[2]
        if status == "timeout":
            self.proc.kill()
        rc = self.proc.wait()
        how = f"a hang past {self.timeout:g}s (killed)" if status == "timeout" else \
            f"signal {-rc}" if rc < 0 else f"exit status {rc}"
        crash = f"the reproducer killed the interpreter ({how}):\n{self._tail(name)}"
        self.close()
        return {"crash": crash}

    def close(self) -> None:
        if self.proc is not None:
            self.proc.stdin.close()
            self.proc.wait()
            self.proc.stdout.close()
            self.stderr.close()
        self.proc = None


@pytest.fixture(scope="session")
def reports():
    child = ReproChild()
    yield child
    child.close()
    shutil.rmtree(child.tmp, ignore_errors=True)


def outcome(child: ReproChild, name: str) -> dict:
    rep = child.run(name)
    if "crash" in rep:
        pytest.fail(rep["crash"] + "\ninstead of raising a typed error")
    return rep


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
snippet("cai_lone_surrogate", '''
    import bridge
    class X: __cuda_array_interface__ = {"version": 3, "shape": (4,), "typestr": "<\\udcff", "data": (4096, False)}
    attempt("asarray", lambda: bridge.asarray(X()))
    report("returned")
''')


def test_cai_typestr_with_a_lone_surrogate_is_a_typed_error_not_a_segfault(reports):
    rep = outcome(reports, "cai_lone_surrogate")
    expect(rep, ("DTypeError", "TypeError", "ValueError"), stage="asarray", words=("typestr",))


snippet("cai_readonly_bool_raises", '''
    import bridge
    class Boom(Exception): pass
    class Flag:
        def __bool__(self): raise Boom("no truth value")
    class X: __cuda_array_interface__ = {"version": 3, "shape": (4,), "typestr": "<f4", "data": (4096, Flag())}
    attempt("asarray", lambda: bridge.asarray(X()))
    report("returned")
''')


def test_cai_readonly_flag_whose_bool_raises_is_not_a_system_error(reports):
    rep = outcome(reports, "cai_readonly_bool_raises")
    assert rep["raised"] != "SystemError", rep
    if rep["raised"] != "Boom":     # the flag's own error, or a typed refusal caused by it
        expect(rep, ("TypeError", "ValueError"), stage="asarray")
        assert rep["cause"] == "Boom" or "read" in rep["msg"], rep


snippet("dlpack_shape_2_62_squared", '''
    import bridge
    from interop_tests.fuzz import t_intake as T
    spec = {"versioned": True, "name": None, "version": (1, 1), "flags": 0, "ndim": 2, "dtype": (2, 32, 1),
            "device": (1, 0), "shape": [2**62, 2**62], "strides": None, "byte_offset": 0, "data": T.PTR,
            "deleter": True, "dlpack_device": "match", "legacy_producer": False}
    obj, _ = T.build(("capsule", spec))
    attempt("asarray", lambda: bridge.asarray(obj))
    report("returned")
''')


def test_dlpack_tensor_of_shape_2_62_squared_is_a_layout_error(reports):
    rep = outcome(reports, "dlpack_shape_2_62_squared")
    expect(rep, ("LayoutError",), stage="asarray", words=("4611686018427387904",))


NUMPY_REFUSED = {   # arrays NumPy's own __dlpack__ refuses: (how to make `a`, class, message words)
    "big_endian": ("np.ones(10, '>f4')", "DTypeError", ("argument 'a' (#0)",)),
    "strides_not_a_multiple_of_the_itemsize": ("np.ndarray((10,), np.float32, buffer=bytearray(64), strides=(6,))",
                                               "LayoutError", ("argument 'a' (#0)",)),
}
for _case, (_make, _, _) in NUMPY_REFUSED.items():
    snippet(f"numpy_refused[{_case}]", f'''
        import numpy as np
        from interop_tests.fuzz.fuzz_kernels import scale
        a, out = {_make}, np.full(10, -7, np.float32)
        attempt("simulate", lambda: scale.simulate(a, out, np.float32(2)), untouched=bool((out == -7).all()))
        report("returned")
    ''')


@pytest.mark.parametrize("case", sorted(NUMPY_REFUSED))
def test_numpy_arrays_numpys_dlpack_refuses_get_typed_errors_from_simulate(reports, case):
    _, cls, words = NUMPY_REFUSED[case]
    rep = outcome(reports, f"numpy_refused[{case}]")
    expect(rep, (cls,), stage="simulate", words=("scale", *words))
    assert rep["untouched"], "the refused launch wrote its output"


snippet("zero_stride_writable", '''
    import numpy as np
    from interop_tests.fuzz.fuzz_kernels import scale
    out = np.lib.stride_tricks.as_strided(np.full(1, -7, np.float32), shape=(10,), strides=(0,))
    attempt("simulate", lambda: scale.simulate(np.ones(10, np.float32), out, np.float32(2)),
            untouched=bool(out[0] == -7))
    report("returned")
''')


def test_a_writable_argument_with_a_zero_stride_is_an_aliasing_error(reports):
    rep = outcome(reports, "zero_stride_writable")
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
for _case, (_config, _) in LAUNCH_CONFIG.items():
    snippet(f"launch_config[{_case}]", f'''
        import numpy as np
        from interop_tests.fuzz.fuzz_kernels import scale
        class Dim:
            def __index__(self): raise ZeroDivisionError("no index")
        a, out = np.ones(10, np.float32), np.full(10, -7, np.float32)
        attempt("simulate", lambda: scale.simulate(a, out, np.float32(2), {_config}),
                untouched=bool((out == -7).all()))
        report("returned")
    ''')


@pytest.mark.parametrize("case", sorted(LAUNCH_CONFIG))
def test_bad_launch_configuration_on_a_validate_only_launch_is_the_contracts_error(reports, case):
    rep = outcome(reports, f"launch_config[{case}]")
    expect(rep, (LAUNCH_CONFIG[case][1],), stage="simulate", words=("scale",))
    assert rep["untouched"]


snippet("block_sum_without_grid", '''
    import numpy as np
    from interop_tests.fuzz.fuzz_kernels import block_sum
    a, total = np.ones(100000, np.float32), np.zeros(1, np.float32)
    attempt("simulate", lambda: block_sum.simulate(a, total), total=float(total[0]))
    report("returned", total=float(total[0]))
''')


def test_a_block_sum_without_grid_is_refused_naming_the_kernel_and_grid(reports):
    rep = outcome(reports, "block_sum_without_grid")
    expect(rep, ("GridSizeError",), stage="simulate", words=("block_sum", "grid="))
    assert rep["total"] == 0.0


# ===================================================================================== contracts
snippet("left_deep_relation", '''
    from bridge import _native
    text = ('{"kernel":"k","args":[{"name":"a","kind":"array","dtype":"f32","ndim":1}],'
            '"requires":["len(a)' + ' + 0' * 20000 + ' == len(a)"]}')
    c = attempt("parse", lambda: _native.Contract(text))
    attempt("validate", lambda: _native.validate(c, [_native.ArrayDesc(4096, [10])], grid=1, block=1))
    report("returned")
''')


def test_a_long_left_deep_relation_is_a_definition_error_at_parse(reports):
    rep = outcome(reports, "left_deep_relation")
    expect(rep, ("ContractDefinitionError",), stage="parse", words=("requires[0]",))


snippet("contract_not_json_text", '''
    from bridge import _native
    attempt("parse", lambda: _native.Contract("\\u00e9"))
    report("returned")
''')


def test_a_contract_that_is_not_json_text_is_a_definition_error_not_a_unicode_error(reports):
    rep = outcome(reports, "contract_not_json_text")
    expect(rep, ("ContractDefinitionError",), stage="parse", words=("invalid contract",))


# ===================================================================================== DSL
KERNEL = """from dsl import simt, f32, i32, tile
@simt.kernel({options})
def k(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    out[i] = a[i]
"""
DEF_AND_COMPILE = '''
    import numpy as np
    m, path = attempt("def", lambda: kernel_module({source!r}))
    x = np.zeros(10, np.float32)
    attempt("compile", lambda: m.k.ptx(x, x.copy(), arch="sm_80"))
    report("returned")
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
    "block_four_dims": ("block=(64, 1, 1, 1)", "block"),                    # found by the fuzz suite
}
for _case, (_options, _) in BAD_OPTIONS.items():
    snippet(f"bad_option[{_case}]", DEF_AND_COMPILE.format(source=KERNEL.format(options=_options)))


@pytest.mark.parametrize("case", sorted(BAD_OPTIONS))
def test_bad_decorator_options_are_a_compile_error_at_the_def(reports, case):
    expect_at_the_def(outcome(reports, f"bad_option[{case}]"), words=(BAD_OPTIONS[case][1],))


snippet("dsl_left_deep_requires", DEF_AND_COMPILE.format(source=KERNEL.format(
    options="block=128, requires=['len(a)' + ' + 0' * 20000 + ' == len(out)']")))


def test_a_long_left_deep_requires_relation_is_a_compile_error_at_the_def(reports):
    expect_at_the_def(outcome(reports, "dsl_left_deep_requires"), words=("requires",))


BODY_ERRORS = {   # kernel body lines (after `i = ...`), lines the error may point at, a message word
    "literal_past_i64_then_augmented": (["j = 9223372036854775808", "j += 1"], (5, 6), "9223372036854775808"),
    "int_cast_of_an_infinite_literal": (["u = i32(1e309)"], (5,), "i32"),        # found by the fuzz suite
    "bool_range_bound": (["for j in range(False, 8):", "    pass"], (5,), "range"),  # found by the fuzz suite
    # found by the fuzz suite: the element count overflows 64 bits and LLVM cannot parse the array type
    "shared_array_past_2_64_elements": (["with simt.unsafe():", "    buf = simt.shared.array((32, 2**63), f32)",
                                         "    buf[0, 0] = 1.0"], (5, 6), "shared"),
}
for _case, (_body, _, _) in BODY_ERRORS.items():
    snippet(f"body_error[{_case}]", DEF_AND_COMPILE.format(source=(
        "from dsl import simt, f32, i32\n@simt.kernel(block=128)\n"
        "def k(a: simt.Array[f32], out: simt.DisjointSlice[f32]):\n    i = simt.thread.index_1d()\n"
        + "".join(f"    {ln}\n" for ln in _body) + "    out[i] = a[i]\n")))


@pytest.mark.parametrize("case", sorted(BODY_ERRORS))
def test_front_end_internal_errors_are_compile_errors_at_the_line(reports, case):
    _, lines, word = BODY_ERRORS[case]
    rep = outcome(reports, f"body_error[{case}]")
    expect(rep, ("DslCompileError",), stage="compile", words=(word,))
    assert rep.get("line") in lines, f"points at line {rep.get('line')}, expected one of {lines}: {rep['msg']}"


snippet("tile_num_warps_3", '''
    import numpy as np
    from dsl import tile
    m, path = attempt("def", lambda: kernel_module(
        "from dsl import tile, f32\\n@tile.kernel(num_warps=3)\\n"
        "def k(a: tile.Array[f32], out: tile.Partition[f32]):\\n"
        "    out.store(tile.load(a, tile.bid(0), out.tile_shape))\\n"))
    x = np.zeros(100, np.float32)
    attempt("compile", lambda: m.k.ptx(x, tile.partition(x.copy(), (64,)), arch="sm_80"))
    report("returned")
''')


def test_tile_num_warps_that_is_not_a_power_of_two_is_refused_at_the_def(reports):
    """Found by the fuzz suite: num_warps=3 is accepted and fails at compile with a ValueError."""
    expect_at_the_def(outcome(reports, "tile_num_warps_3"), words=("num_warps",))


# ===================================================================================== found beyond the issue
snippet("contract_text_lone_surrogate", '''
    from bridge import _native
    attempt("parse", lambda: _native.Contract('{"kernel": "k\\udcff", "args": []}'))
    report("returned")
''')


def test_a_contract_text_with_a_lone_surrogate_is_a_definition_error(reports):
    """Found by the fuzz suite: a Python str that is not valid UTF-8 is refused by pybind11's argument
    conversion with a TypeError ('incompatible constructor arguments') instead of a contract error."""
    expect(outcome(reports, "contract_text_lone_surrogate"), ("ContractDefinitionError",), stage="parse")


VALIDATE_CONFIG = {   # found by the fuzz suite on bridge._native.validate
    "empty_grid_tuple": ("grid=()", "GridSizeError"),
    "float_shared_memory": ("smem=1.5", "SharedMemoryError"),
}
for _case, (_config, _) in VALIDATE_CONFIG.items():
    snippet(f"native_validate[{_case}]", f'''
        from bridge import _native
        c = _native.Contract('{{"kernel":"k","args":[{{"name":"a","kind":"array","dtype":"f32","ndim":1}}]}}')
        attempt("validate", lambda: _native.validate(c, [_native.ArrayDesc(4096, [10])], {_config}))
        report("returned")
    ''')


@pytest.mark.parametrize("case", sorted(VALIDATE_CONFIG))
def test_native_validate_refuses_bad_configuration_with_the_contracts_errors(reports, case):
    expect(outcome(reports, f"native_validate[{case}]"), (VALIDATE_CONFIG[case][1],), stage="validate")


# ===================================================================================== module bytes
CUBIN_REPRO = '''
    import struct
    from interop_tests.fuzz import t_modules as M
    from bridge.fatbin import embedded_contracts
    if "nvcc.cubin" not in M.bases():
        report("skipped")
        sys.exit(0)
    cubin = bytearray(M.bases()["nvcc.cubin"].read_bytes())
    original = embedded_contracts(bytes(cubin))
{mutate}
    got = attempt("read", lambda: embedded_contracts(bytes(data)))
    report("returned", got=got, original=original)
'''


def _skip_without_cubin(rep: dict) -> None:
    if rep["stage"] == "skipped":
        missing("no nvcc: no module for these reproducers to mutate")


MODULE_BYTES = {   # found by the fuzz suite; the issue (section 3) lists these exception types
    "truncated_elf_header": "data = cubin[:15]",
    "invalid_utf8_in_the_contract": "at = cubin.index(b'{\"version\"')\ncubin[at + 2] = 0xFF\ndata = cubin",
    "symbol_table_linked_to_a_missing_section": (
        "shoff = struct.unpack_from('<Q', cubin, 0x28)[0]\nshentsize, shnum = struct.unpack_from('<HH', cubin, 0x3A)\n"
        "for i in range(shnum):\n"
        "    h = shoff + i * shentsize\n"
        "    if struct.unpack_from('<I', cubin, h + 4)[0] == 2:\n"
        "        struct.pack_into('<I', cubin, h + 40, 0xFFFF)\n"
        "data = cubin"),
    # block.exact 64 -> 65: still valid JSON and a valid contract, so only a checksum can tell
    "flipped_digit_in_the_contract": "at = cubin.index(b'\"exact\":[64,')\ncubin[at + 10] = ord('5')\ndata = cubin",
}
for _case, _mutate in MODULE_BYTES.items():
    snippet(f"module_bytes[{_case}]", CUBIN_REPRO.format(mutate=textwrap.indent(_mutate, "    ")))


@pytest.mark.parametrize("case", sorted(set(MODULE_BYTES) - {"flipped_digit_in_the_contract"}))
@pytest.mark.slow
def test_malformed_cubin_bytes_are_module_format_errors(reports, case):
    rep = outcome(reports, f"module_bytes[{case}]")
    _skip_without_cubin(rep)
    expect(rep, ("ModuleFormatError", "ContractDefinitionError"), stage="read")


def test_a_flipped_digit_in_an_embedded_contract_never_gives_a_different_contract(reports):
    rep = outcome(reports, "module_bytes[flipped_digit_in_the_contract]")
    _skip_without_cubin(rep)
    if rep["raised"] is None:
        assert rep["got"].get("fill") in (None, rep["original"]["fill"]), \
            f"corrupt bytes gave a different contract: {rep['got'].get('fill')}"
    else:
        expect(rep, ("ModuleFormatError", "ContractDefinitionError"), stage="read", words=("fill",))


snippet("lz4_bomb", '''
    import tracemalloc
    from interop_tests.fuzz import t_modules as M
    from bridge.fatbin import embedded_contracts
    names = [n for n in M.bases() if n.endswith(".fatbin")]
    if not names:
        report("skipped")
        sys.exit(0)
    data = bytes(M._lz4_bomb(bytearray(M.bases()[names[0]].read_bytes()), 0, 1_000_000))  # 4096 B -> ~255 MB
    tracemalloc.start()
    tracemalloc.reset_peak()
    try:
        embedded_contracts(data)
        exc = None
    except BaseException as e:   # noqa: BLE001
        exc = e
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    report("read" if exc else "returned", exc, peak_mb=peak)
''')


def test_an_lz4_entry_that_expands_past_its_declared_size_is_refused_without_allocating_it(reports):
    require_lz4_package()     # without it the entry is refused undecoded (CompressedEntryError)
    rep = outcome(reports, "lz4_bomb")
    _skip_without_cubin(rep)
    expect(rep, ("ModuleFormatError",), stage="read")
    assert rep["peak_mb"] < 32, f"the reader allocated {rep['peak_mb']:.0f} MB for a 4096-byte entry"
