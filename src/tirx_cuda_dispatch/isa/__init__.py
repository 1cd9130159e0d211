"""Hardware facts as data: one record per instruction shape (a frozen dataclass, in the
manner of CuTe's copy and MMA traits), each citing the PTX ISA section it is read from.
Variants pick from these tables and never restate them, so two variants that move the same
fragment (copy -> ldstmatrix and a future gemm -> mma) read one description of it. The
simulator's fragment oracle (``sim/fragments.py``) is a second description, written from
the ISA independently of these records and never importing them, so a simulated run of
what a variant emits checks the one against the other.
"""
