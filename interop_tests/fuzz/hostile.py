"""Hostile stand-ins for the values a producer or a caller may hand the runtime.

Each is a small picklable class whose repr evaluates back to it (`from interop_tests.fuzz.hostile
import *`), so a fuzz input made of them prints as its own reproducer. They misbehave in exactly one
way: a dunder that raises, a number that is not an int, a sequence that lies about its length.
"""
from __future__ import annotations

__all__ = ["HostileError", "HostileConfigError", "RaisingIndex", "RaisingDim", "RaisingBool", "RaisingInt", "FloatLike", "LyingSeq",
           "RaisingIter", "IntSubclass", "StrSubclass"]


class HostileError(Exception):
    """What hostile objects raise: the consumer may let it propagate or wrap it in a typed error."""


class RaisingIndex:
    """An 'integer' whose __index__ (and __int__) raises."""

    def __index__(self) -> int:
        raise HostileError("__index__ refused")

    __int__ = __index__

    def __repr__(self) -> str:
        return "RaisingIndex()"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RaisingIndex)

    def __hash__(self) -> int:
        return 1


class HostileConfigError(Exception):
    """What a hostile launch-configuration value raises: the issue wants the contract's typed error
    (BlockSizeError, GridSizeError, SharedMemoryError) instead, so this one is never allowed through."""


class RaisingDim(RaisingIndex):
    """A grid/block/shared-memory value whose __index__ raises."""

    def __index__(self) -> int:
        raise HostileConfigError("__index__ of a launch dimension refused")

    __int__ = __index__

    def __repr__(self) -> str:
        return "RaisingDim()"


class RaisingBool:
    """A flag whose truth value raises (e.g. the CAI `readonly` flag)."""

    def __bool__(self) -> bool:
        raise HostileError("__bool__ refused")

    def __repr__(self) -> str:
        return "RaisingBool()"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RaisingBool)

    def __hash__(self) -> int:
        return 2


class RaisingInt(int):
    """An int subclass whose __index__ raises (PyLong_Check passes, PyNumber_Index may call it)."""

    def __index__(self) -> int:
        raise HostileError("int subclass __index__ refused")

    def __repr__(self) -> str:
        return f"RaisingInt({int(self)})"


class IntSubclass(int):
    """A well-behaved int subclass (bool-like exactness checks must not reject or crash on it)."""

    def __repr__(self) -> str:
        return f"IntSubclass({int(self)})"


class StrSubclass(str):
    def __repr__(self) -> str:
        return f"StrSubclass({str.__repr__(self)})"


class FloatLike:
    """A number with __float__ only (not an integer)."""

    def __init__(self, value: float) -> None:
        self.value = value

    def __float__(self) -> float:
        return self.value

    def __repr__(self) -> str:
        return f"FloatLike({self.value!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FloatLike) and other.value == self.value

    def __hash__(self) -> int:
        return hash(self.value)


class LyingSeq:
    """A sequence whose len() says `claimed` but which holds `items` (indexing past them raises)."""

    def __init__(self, items: tuple, claimed: int) -> None:
        self.items, self.claimed = tuple(items), claimed

    def __len__(self) -> int:
        return self.claimed

    def __getitem__(self, i: int):
        if isinstance(i, slice):
            return self.items[i]
        if not 0 <= i < len(self.items):
            raise IndexError(i)
        return self.items[i]

    def __iter__(self):
        return iter(self.items)

    def __repr__(self) -> str:
        return f"LyingSeq({self.items!r}, {self.claimed!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LyingSeq) and (other.items, other.claimed) == (self.items, self.claimed)

    def __hash__(self) -> int:
        return hash((self.items, self.claimed))


class RaisingIter:
    """A sequence whose len() works but whose iteration and indexing raise."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i):
        raise HostileError("__getitem__ refused")

    def __iter__(self):
        raise HostileError("__iter__ refused")

    def __repr__(self) -> str:
        return f"RaisingIter({self.n})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RaisingIter) and other.n == self.n

    def __hash__(self) -> int:
        return self.n
