"""The PTX instruction families the tile lowering emits (table.py) and their CPU semantics for the
simulator (sm80.py, sm90.py). The lowering imports only the table; semantics load on first use."""
