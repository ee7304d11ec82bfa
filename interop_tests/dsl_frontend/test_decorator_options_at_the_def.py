"""Bad decorator options are DslCompileErrors at the `def` (file:line, the source line, a caret under
the option, a hint), raised when the function is decorated. Several of them used to reach LLVM, which
aborted the interpreter (`block=(0, 1, 1)`, `(128, -0.0, 1)`: SIGABRT) or exited it
(`block=(-1, 1, 1)`, `(2**64, 1, 1)`, `launch_bounds=-1` / `2**40`: "can't parse integer attribute")."""
from __future__ import annotations

import linecache

import numpy as np
import pytest

from dsl import DslCompileError, f32, simt, tile

HERE = __file__


def body(a: simt.Array[f32], out: simt.DisjointSlice[f32], s: f32):   # BODY-DEF
    i = simt.thread.index_1d()
    out[i] = a[i] * s


def line_of(marker: str) -> int:
    return next(k for k in range(1, 5000) if marker in linecache.getline(HERE, k))


BAD_SIMT = [
    (dict(block=(0, 1, 1)), "block= (0, 1, 1): the x dimension must be in [1, 1024], got 0"),
    (dict(block=(128, -0.0, 1)), "block= must be an int or a tuple of 1 to 3 ints, got (128, -0.0, 1)"),
    (dict(block=(-1, 1, 1)), "block= (-1, 1, 1): the x dimension must be in [1, 1024], got -1"),
    (dict(block=(2**64, 1, 1)), "the x dimension must be in [1, 1024], got 18446744073709551616"),
    (dict(block=(1, 1, 65)), "block= (1, 1, 65): the z dimension must be in [1, 64], got 65"),
    (dict(block=(1, 1025)), "the y dimension must be in [1, 1024], got 1025"),
    (dict(block=(64, 32)), "block= (64, 32, 1) has 2048 threads, more than the 1024"),
    (dict(block=True), "block= must be an int or a tuple of 1 to 3 ints, got bool True"),
    (dict(block=(1.5,)), "got (1.5,)"),
    (dict(block="a"), "got str 'a'"),
    (dict(block=()), "got ()"),
    (dict(block=(1, 1, 1, 1)), "got (1, 1, 1, 1)"),
    (dict(launch_bounds=-1), "launch_bounds= must be an int in [1, 1024], got int -1"),
    (dict(launch_bounds=2**40), "launch_bounds= must be an int in [1, 1024], got int 1099511627776"),
    (dict(launch_bounds=0), "launch_bounds= must be an int in [1, 1024], got int 0"),
    (dict(launch_bounds=1.5), "got float 1.5"),
    (dict(block=128, launch_bounds=128), "give block= (exact) or launch_bounds= (maximum), not both"),
    (dict(min_cc=2000), "min_cc= must be an int in [50, 129], got int 2000"),
    (dict(min_cc=8.0), "min_cc= must be an int in [50, 129], got float 8.0"),
    (dict(min_cc=-1), "got int -1"),
    (dict(shared_mem=-5), "shared_mem= must be an int in [0, 4294967295], got int -5"),
    (dict(shared_mem=("max", -1)), "shared_mem= must be an int in [0, 4294967295], got int -1"),
    (dict(shared_mem=("min", 5)), "shared_mem= must be an int or (\"max\", n), got ('min', 5)"),
    (dict(shared_mem=1.5), "got float 1.5"),
    (dict(shared_mem=2**40), "got int 1099511627776"),
    (dict(domain=4), "domain= must be 1, 2 or 3, got int 4"),
    (dict(domain=True), "domain= must be 1, 2 or 3, got bool True"),
    (dict(requires=5), "requires= must be a string or a list of strings, got 5"),
    (dict(requires=["len(a) =="]), "requires=: cannot parse 'len(a) =='"),
    (dict(requires=["len(a) == len(zz)"]), "requires=: 'len(a) == len(zz)' names 'zz', which is not a parameter"),
    (dict(requires=["(" * 300 + "len(a)" + ")" * 300 + " == 1"]), "requires=: cannot parse"),
    (dict(inplace=5), "inplace= must be a list of (name, name) pairs, got 5"),
    (dict(inplace="ab"), "inplace= must be a list of (name, name) pairs, got 'ab'"),
    (dict(inplace=[("a",)]), "inplace=: ('a',) is not a pair of parameter names"),
    (dict(inplace=[("a", "zz")]), "inplace=: 'zz' is not a parameter"),
    (dict(inplace=[("a", "a")]), "inplace=: ('a', 'a') pairs a parameter with itself"),
    (dict(boundscheck="no"), "boundscheck= must be True or False, got str 'no'"),
    (dict(fastmath=1), "fastmath= must be True or False, got int 1"),
    (dict(grid_from=3), "grid_from= must be a parameter name, got int 3"),
    (dict(grid_from="zz"), "grid_from=: 'zz' is not a parameter"),
    (dict(grid_from="s"), "grid_from=: 's' is a scalar, not an array"),
    (dict(grid_from="a", domain=2), "grid_from=: 'a' is 1-D, fewer axes than domain=2"),
]


@pytest.mark.parametrize("options, text", BAD_SIMT, ids=[repr(o)[:60] for o, _ in BAD_SIMT])
def test_bad_simt_kernel_options_are_compile_errors_at_the_def(options, text):
    with pytest.raises(DslCompileError) as info:
        simt.kernel(**options)(body)
    e = info.value
    assert e.message.startswith("@simt.kernel 'body': ") and text in e.message, e.message
    assert (e.file, e.line) == (HERE, line_of("# BODY-DEF"))   # no decorator in the source: the def
    assert str(e).startswith(f"{HERE}:{e.line}:") and "\nhint: " in str(e)


def test_the_caret_points_at_the_bad_option_in_the_decorator():
    with pytest.raises(DslCompileError) as info:
        @simt.kernel(domain=1, block=(0, 1, 1))   # CARET-BLOCK
        def k(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
            i = simt.thread.index_1d()
            out[i] = a[i]
    e = info.value
    line = line_of("# CARET-BLOCK")
    text = linecache.getline(HERE, line).rstrip("\n")
    assert (e.file, e.line, e.col) == (HERE, line, text.index("(0, 1, 1)") + 1)
    assert str(e).splitlines()[1:3] == ["    " + text, "    " + " " * (e.col - 1) + "^~~~~~~~~"]


def test_the_caret_points_at_the_bad_relation_in_a_list():
    with pytest.raises(DslCompileError) as info:
        @simt.kernel(requires=["len(a) == len(out)", "len(a) == len(q)"])   # CARET-REL
        def k(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
            i = simt.thread.index_1d()
            out[i] = a[i]
    e = info.value
    line = line_of("# CARET-REL")
    assert (e.line, e.col) == (line, linecache.getline(HERE, line).index('"len(a) == len(q)"') + 1)
    assert "names 'q', which is not a parameter" in e.message and "parameters are: a, out" in e.hint


def test_a_very_long_relation_is_a_compile_error_at_the_def_or_works():
    rel = "len(a)" + " + 0" * 20000 + " == len(a)"
    try:
        k = simt.kernel(requires=[rel])(body)
    except DslCompileError as e:       # CPython's parser gives up (RecursionError) on some versions
        assert "requires=: relation 'len(a) + 0 + 0" in e.message and "cannot be parsed" in e.message
        assert (e.file, e.line) == (HERE, line_of("# BODY-DEF"))
        return
    a = np.arange(50, dtype=np.float32)
    out = np.zeros(50, np.float32)
    k.simulate(a, out, np.float32(2))  # parsed everywhere (front end, native contract): it must hold
    np.testing.assert_array_equal(out, a * 2)


def test_good_options_are_normalised():
    k = simt.kernel(block=[32, 8], shared_mem=["max", 4096], min_cc=np.int64(120), requires="len(a) == len(out)",
                    inplace=[["a", "out"]])(body)
    o = k.options
    assert o.block == (32, 8, 1) and type(o.block[0]) is int
    assert o.shared_mem == ("max", 4096) and o.min_cc == 120 and type(o.min_cc) is int
    assert o.requires == ("len(a) == len(out)",) and o.inplace == (("a", "out"),)
    assert simt.kernel(launch_bounds=1024, min_cc=0)(body).options.launch_bounds == 1024
    assert simt.kernel(block=(1, 1, 64))(body).options.block == (1, 1, 64)


def test_a_compiled_kernel_gets_the_checked_block_in_its_ptx():
    k = simt.kernel(block=[32, 8])(body)
    x = np.zeros(10, np.float32)
    assert ".reqntid 32, 8, 1" in k.ptx(x, x.copy(), np.float32(1))


def tile_body(a: tile.Array[f32], out: tile.Partition[f32]):   # TILE-DEF
    t = tile.bid(0)
    out.store(tile.load(a, t, out.tile_shape))


@pytest.mark.parametrize("options, text", [
    (dict(num_warps=3), "num_warps= must be a power of two in [1, 32], got int 3"),
    (dict(num_warps=0), "got int 0"),
    (dict(num_warps=64), "got int 64"),
    (dict(num_warps=True), "got bool True"),
    (dict(num_warps=4.0), "got float 4.0"),
    (dict(persistent="yes"), "persistent= must be True or False, got str 'yes'"),
])
def test_bad_tile_kernel_options_are_compile_errors_at_the_def(options, text):
    with pytest.raises(DslCompileError) as info:
        tile.kernel(**options)(tile_body)
    e = info.value
    assert e.message.startswith("@tile.kernel 'tile_body': ") and text in e.message, e.message
    assert (e.file, e.line) == (HERE, line_of("# TILE-DEF"))


def test_good_tile_options_still_work():
    k = tile.kernel(num_warps=4, persistent=True)(tile_body)
    assert (k.num_warps, k.persistent) == (4, True)
    a = np.arange(300, dtype=np.float32)
    out = np.zeros_like(a)
    k.simulate(a, tile.partition(out, (128,)))
    np.testing.assert_array_equal(out, a)


@pytest.mark.parametrize("export", ["a b", "9lives", "", 5, "x-y"])
def test_a_device_export_name_must_be_a_c_identifier(export):
    def scale(x: f32) -> f32:   # DEVICE-DEF
        return x * 2
    with pytest.raises(DslCompileError) as info:
        simt.device(export=export)(scale)
    assert "@simt.device 'scale': export= must be a C identifier" in info.value.message
    assert info.value.line == line_of("# DEVICE-DEF")
    assert simt.device(export="dsl_scale")(scale).export == "dsl_scale"


def test_non_ascii_kernel_and_parameter_names_are_refused_at_the_def():
    # LLVM aborts the process on a non-ASCII PTX symbol ("Symbol name with unsupported characters")
    def café(a: simt.Array[f32], out: simt.DisjointSlice[f32]):   # NAME-DEF
        i = simt.thread.index_1d()
        out[i] = a[i]

    def k(a: simt.Array[f32], ñout: simt.DisjointSlice[f32]):   # PARAM-DEF
        i = simt.thread.index_1d()
        ñout[i] = a[i]

    def tadé(a: tile.Array[f32], out: tile.Partition[f32]):   # TILE-NAME-DEF
        out.store(tile.load(a, tile.bid(0), out.tile_shape))

    for deco, fn, marker, text in [
            (simt.kernel, café, "# NAME-DEF", "@simt.kernel 'café': the kernel name 'café' is not ASCII"),
            (simt.kernel(block=64), k, "# PARAM-DEF", "@simt.kernel 'k': parameter name 'ñout' is not ASCII"),
            (tile.kernel, tadé, "# TILE-NAME-DEF", "@tile.kernel 'tadé': the kernel name 'tadé' is not ASCII")]:
        with pytest.raises(DslCompileError) as info:
            deco(fn)
        e = info.value
        assert e.message == text and e.line == line_of(marker), str(e)
        assert "use ASCII letters, digits and _" in e.hint
    line = line_of("# PARAM-DEF")            # the parameter case points at the parameter
    with pytest.raises(DslCompileError) as info:
        simt.kernel(k)
    assert info.value.col == linecache.getline(HERE, line).index("ñout") + 1
