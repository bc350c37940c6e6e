"""Python client of tesserad, the tessera daemon (proto/tessera.proto).

    import numpy as np
    import tessera

    with tessera.Client("127.0.0.1:50051") as c:
        g = tessera.Graph()
        x = g.input(tessera.F32, [4, 2])           # numpy shape (2, 4)
        y = g.soft_max(g.scale(x, 2.0))
        (out,) = c.compute(g, {x: np.ones((2, 4), np.float32)}, [y])

Shapes in graphs are ggml's `ne`, innermost first (see tessera.graph).
"""

from .types import (BF16, F16, F32, FLAG_INPUT, FLAG_OUTPUT, FLAG_PARAM, I32,
                    Q2_K, Q3_K, Q4_0, Q4_1, Q4_K, Q5_0, Q5_1, Q5_K, Q6_K, Q8_0,
                    ROPE_NEOX, ROPE_NORMAL, GluOp, Op, SortOrder, Type,
                    UnaryOp)
from .graph import Graph, GraphError, Tensor
from .client import (MIN_PROTOCOL_VERSION, PROTOCOL_VERSION, Buffer, Client,
                     RegisteredGraph, TesseraError)
from ._proto import pb2, pb2_grpc
