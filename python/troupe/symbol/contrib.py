"""mx.sym.contrib: control flow (foreach, while_loop, cond) is built in troupe's C++ API (graph/control_flow.h);
from Python it is not yet available. Symbols MXNet saved with it load and run (mx.sym.load)."""
