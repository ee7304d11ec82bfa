"""One reader of PTX `.entry` names (bridge/_ptx_text.py) for bridge.Module and the foreign-kernel intake:
commented-out entries are not entries, bytes and text read alike, and the intake's parameter reader
(bridge/foreign/ptx.py) lists the same entries in the same order."""
from __future__ import annotations

from bridge.foreign.ptx import ptx_entries
from bridge._ptx_text import entry_names, strip_comments

PTX = """
.version 8.4
.target sm_90
// .visible .entry commented_out(.param .u64 p)
/* .visible .entry also_commented(
   .param .u64 p) */
.visible .entry vecadd(
    .param .u64 vecadd_param_0,
    .param .u32 vecadd_param_1
)
{ ret; }
.visible .entry $triton_kernel(.param .u64 .ptr .global .align 1 p0) { ret; }
.entry %weird_but_legal() { ret; }
"""


def test_entries_are_read_in_order_without_the_commented_ones():
    assert entry_names(PTX) == ["vecadd", "$triton_kernel", "%weird_but_legal"]


def test_bytes_and_text_read_alike():
    assert entry_names(PTX.encode("latin-1")) == entry_names(PTX)


def test_the_foreign_intake_lists_the_same_entries():
    assert list(ptx_entries(PTX)) == entry_names(PTX)
    assert [p.size for p in ptx_entries(PTX)["vecadd"]] == [8, 4]


def test_comments_of_both_kinds_are_stripped():
    assert strip_comments("a // b\nc /* d\n e */ f").split() == ["a", "c", "f"]
