"""A device function in a file of its own: its statements must map to THIS file in the line table."""
from __future__ import annotations

from dsl import f32, simt


@simt.device
def cube(x: f32) -> f32:  # LINE:cube-def
    y = x * x              # LINE:cube-mul
    return y * x           # LINE:cube-ret
