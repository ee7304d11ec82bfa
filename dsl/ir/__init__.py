"""The typed kernel IR shared by the front end, the code generator and the CPU simulator."""
from dsl.ir import nodes, types  # noqa: F401
