"""SIMT and tile kernels read their parameter annotations through ONE parser (dsl/annotations.py): the
same mistakes give the same AnnotationError (a DslCompileError with file:line:col and caret, and a
TypeError) with the same message, at the parameter. Tile kernels find them at the decorator (their
launch plan needs the parameter kinds), SIMT kernels at first use, as before. (No `from __future__
import annotations` here: the string annotations below are meant as written.)"""

import json
import os
import subprocess
import sys
import textwrap
import typing
from pathlib import Path

import numpy as np
import pytest

import dsl
from dsl import f32, i64, simt, tile
from dsl.annotations import AnnotationError, ParamAnnotation, parse_annotations
from dsl.errors import DslCompileError
from dsl.ir.types import F32, I64

HERE = Path(__file__).resolve()
LINES = HERE.read_text().splitlines()
ROOT = HERE.parents[2]


def position(marker: str, construct: str, after: str = "") -> tuple[int, int]:
    """(line, col) of `construct` (the first one after `after`) on the line carrying `marker`, read
    from this file."""
    line = next(k for k, t in enumerate(LINES, 1) if marker in t)
    text = LINES[line - 1]
    return line, text.index(construct, text.index(after) + len(after) if after else 0) + 1


def simt_error(fn) -> AnnotationError:
    with pytest.raises(AnnotationError) as info:
        simt.kernel(fn).annotations
    return info.value


def tile_error(fn) -> AnnotationError:
    with pytest.raises(AnnotationError) as info:
        tile.kernel(fn)
    return info.value


# one pair of functions per mistake; the markers let the test find the expected positions
def s_missing(a: simt.Array[f32], n):  # m-s-missing
    pass


def t_missing(a: tile.Array[f32], n):  # m-t-missing
    pass


def s_pyint(a: simt.Array[f32], n: int):  # m-s-pyint
    pass


def t_pyint(a: tile.Array[f32], n: int):  # m-t-pyint
    pass


def s_undefined(a: simt.Array[f32], n: "no_such_dtype"):  # m-s-undef  # noqa: F821
    pass


def t_undefined(a: tile.Array[f32], n: "no_such_dtype"):  # m-t-undef  # noqa: F821
    pass


def s_default(a: simt.Array[f32], n: i64 = 3):  # m-s-default
    pass


def t_default(a: tile.Array[f32], n: i64 = 3):  # m-t-default
    pass


def s_star(a: simt.Array[f32], *rest):  # m-s-star
    pass


def t_star(a: tile.Array[f32], *rest):  # m-t-star
    pass


MISTAKES = [      # (mistake, construct the caret is under, the text before it, message, hint shared)
    ("missing", "n", "], ", "parameter 'n' has no type annotation", False),
    ("pyint", "int", "n: ", "parameter 'n': Python type 'int' has no fixed width", True),
    ("undef", '"no_such_dtype"', "n: ", "cannot evaluate this annotation (NameError: name 'no_such_dtype' is not "
     "defined)", False),
    ("default", "3", "= ", "kernel parameters cannot have default values", True),
    ("star", "rest", "*", "kernels take plain positional parameters only", True),
]
FUNCS = {"missing": (s_missing, t_missing), "pyint": (s_pyint, t_pyint), "undef": (s_undefined, t_undefined),
         "default": (s_default, t_default), "star": (s_star, t_star)}


@pytest.mark.parametrize("mistake,construct,after,message,same_hint", MISTAKES, ids=[m[0] for m in MISTAKES])
def test_the_same_mistake_is_the_same_error_in_both_models(mistake, construct, after, message, same_hint):
    s_fn, t_fn = FUNCS[mistake]
    s_err, t_err = simt_error(s_fn), tile_error(t_fn)
    for err, model in ((s_err, "s"), (t_err, "t")):
        assert isinstance(err, DslCompileError) and isinstance(err, TypeError)
        assert err.message == message
        line, col = position(f"m-{model}-{mistake}", construct, after)
        assert (err.file, err.line, err.col) == (str(HERE), line, col)
        rendered = str(err).splitlines()
        assert rendered[0] == f"{HERE}:{line}:{col}: error: {message}"
        assert rendered[2] == "    " + " " * (col - 1) + "^" + "~" * (len(construct) - 1)
    if same_hint:
        assert s_err.hint == t_err.hint
    else:      # the hint shows an annotation of the kernel's own model
        assert "simt." in s_err.hint and "tile." in t_err.hint and "simt." not in t_err.hint


def s_wrong_family(a: tile.Array[f32]):  # m-s-family
    pass


def t_wrong_family(a: simt.Array[f32]):  # m-t-family
    pass


def test_an_annotation_of_the_other_model_is_refused_with_this_models_hint():
    s_err, t_err = simt_error(s_wrong_family), tile_error(t_wrong_family)
    assert s_err.message == "parameter 'a': unsupported annotation tile.Array[dsl.f32]"
    assert "simt.DisjointSlice" in s_err.hint
    assert t_err.message == "parameter 'a': unsupported annotation simt.Array[dsl.f32, 1]"
    assert "tile.Partition" in t_err.hint
    assert (t_err.line, t_err.col) == position("m-t-family", "simt.Array[f32]")


E = dsl.TypeVar("E")
TT = typing.TypeVar("TT")


def every_kind(a: tile.Array[f32], b: tile.Array[E, 2], p: tile.Partition[f32, 2], q: tile.Partition,
               k: tile.Constant[int], s: f32, g: E, h: TT):
    pass


def test_the_parser_reads_every_tile_kind_dtype_and_ndim():
    anns = parse_annotations(every_kind, "tile")
    assert anns == [ParamAnnotation("a", "array", F32, None, False), ParamAnnotation("b", "array", E, 2, False),
                    ParamAnnotation("p", "partition", F32, 2, True), ParamAnnotation("q", "partition", None, None, True),
                    ParamAnnotation("k", "const", None, None, False), ParamAnnotation("s", "scalar", F32, 0, False),
                    ParamAnnotation("g", "scalar", E, 0, False), ParamAnnotation("h", "scalar", TT, 0, False)]
    assert [a.is_generic for a in anns] == [False, True, False, False, False, False, True, True]


def simt_kinds(a: simt.Array[f32, 2], out: simt.DisjointSlice[E], n: "i64"):
    pass


def test_simt_annotations_and_string_annotations_evaluate_in_the_function_globals():
    anns = parse_annotations(simt_kinds, "simt")
    assert anns == [ParamAnnotation("a", "array", F32, 2, False), ParamAnnotation("out", "array", E, 1, True),
                    ParamAnnotation("n", "scalar", I64, 0, False)]
    assert repr(anns[0]) == "ParamAnnotation(name='a', kind='array', dtype=f32, ndim=1, writable=False)".replace(
        "ndim=1", "ndim=2")   # the dataclass repr is unchanged; compile errors quote spelling()
    assert [a.spelling() for a in anns] == ["simt.Array[f32, 2]", "simt.DisjointSlice[E]", "i64"]


def t_bad_dtype(a: tile.Array["float32"]):  # m-t-dtype  # noqa: F821 (a string that is no dtype: the error under test)
    pass


def t_bad_ndim(a: tile.Array[f32, 0]):  # m-t-ndim
    pass


def test_tile_array_items_are_checked_at_the_decorator():
    err = tile_error(t_bad_dtype)
    assert err.message == "parameter 'a': 'float32' is not a dtype"
    assert (err.line, err.col) == position("m-t-dtype", 'tile.Array["float32"]')
    assert tile_error(t_bad_ndim).message == "parameter 'a': ndim must be a positive int, got 0"


@pytest.mark.slow
def test_a_fresh_process_cache_hit_imports_no_front_end_or_llvm():
    """The first launch of a kernel in a fresh process with a warm disk cache goes annotations ->
    signature -> disk cache -> Launcher: no SIMT or tile front end, no llvmlite.binding."""
    child = textwrap.dedent("""
        import json, sys
        import numpy as np
        sys.path.insert(0, sys.argv[1])
        import hot_kernels as k
        from dsl import tile
        a = np.zeros(100, np.float32)
        x = np.zeros((4, 100), np.float32)
        c1 = k.vecadd.compile(a, a, a.copy(), arch="sm_90")
        c2 = k.softmax.compile((x, tile.partition(x.copy(), (1, 128))), "sm_90")
        heavy = sorted(m for m in sys.modules if m.startswith(("dsl.frontend", "dsl.tile.frontend",
                       "dsl.tile.lower", "llvmlite.binding", "dsl.backend.codegen")))
        print(json.dumps({"cache": [c1.metadata["cache"], c2.metadata["cache"]], "heavy": heavy}))
    """)
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "hot_kernels.py").write_text(textwrap.dedent("""
            from dsl import simt, tile, f32

            @simt.kernel
            def vecadd(a: simt.Array[f32], b: simt.Array[f32], out: simt.DisjointSlice[f32]):
                i = simt.thread.index_1d()
                out[i] = a[i] + b[i]

            @tile.kernel
            def softmax(x: tile.Array[f32, 2], out: tile.Partition[f32, 2]):
                v = tile.load(x, (tile.bid(0), 0), out.tile_shape, padding=-float("inf"))
                e = tile.exp(v - tile.max(v, axis=1, keepdims=True))
                out.store(e / tile.sum(e, axis=1, keepdims=True))
        """))
        env = dict(os.environ, KB_CACHE_DIR=str(Path(tmp) / "cache"), KB_CACHE="1", PYTHONPATH=str(ROOT))
        runs = [json.loads(subprocess.run([sys.executable, "-c", child, tmp], env=env, capture_output=True,
                                          text=True, check=True, cwd=str(ROOT)).stdout.splitlines()[-1])
                for _ in range(2)]
    assert runs[0]["cache"] == ["miss", "miss"] and runs[0]["heavy"]        # the test can see imports
    assert runs[1] == {"cache": ["disk", "disk"], "heavy": []}


def test_a_generic_scalar_binds_from_an_array_in_tile_kernels_too():
    @tile.kernel
    def scale(a: tile.Array[E], out: tile.Partition[E], s: E):
        out.store(tile.load(a, tile.bid(0), out.tile_shape) * s)
    a = np.arange(8, dtype=np.float64)
    out = np.zeros(8)
    scale.simulate(a, tile.partition(out, (8,)), 2)        # s binds to f64 from `a`, converts
    np.testing.assert_array_equal(out, a * 2)
    assert scale.signature((a, tile.partition(out, (8,)), 2))[2].dtype.name == "f64"
