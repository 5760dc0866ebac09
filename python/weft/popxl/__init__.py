"""weft.popxl: PopXL's Python API over weft, so that PopXL programs run with their imports changed.

    import weft.popxl as popxl
    import weft.popxl.ops as ops

    ir = popxl.Ir(replication=4)                     # or "popdist": the replicas a launcher gives this process
    with ir.main_graph, popxl.in_sequence():         # records the graph (popxl/_graph.py)
        w = popxl.variable(np.arange(16, dtype=np.int32), name="w")
        out = popxl.d2h_stream(w.shape, w.dtype)
        ops.host_store(out, w)
        ops.add_(w, popxl.constant(np.int32(2)))
    with popxl.Session(ir, "ipu_hw") as session:     # runs the graph on every replica (popxl/_session.py)
        outs = session.run()                         # {out: (4, 16)}
    session.get_tensor_data(w)                       # (16,): w + 2

The Ir's state (variables, remote buffers, streams, groupings) is a weft.Session's; docs/python.md says what
is recorded, how a session runs it, and which PopXL names are not supported (those raise an error naming the
name and what weft.popxl has instead). Subgraphs (ir.create_graph, ops.call, _subgraph.py) and
popxl.transforms.autodiff (transforms/autodiff.py) are docs/popxl.md's "Subgraphs and autodiff".
"""
from . import dtypes
from . import ops
from . import transforms
from ._graph import Constant, Graph, Tensor, gcg, in_sequence
from ._subgraph import TensorSpec, graph_input, graph_output
from ._ir import Ir
from ._session import Session
from ._state import (DeviceToHostStream, HostToDeviceStream, RemoteBuffer, Variable, constant, d2h_stream,
                     h2d_stream, remote_buffer, remote_replica_sharded_variable, remote_variable,
                     replica_sharded_buffer, replica_sharded_variable, variable)
from .dtypes import (bfloat16, bool, dtype, float16, float32, float64, half, int8, int16, int32, int64,  # noqa: A004
                     uint8, uint16, uint32, uint64)
from weft._weft import ReplicaGroups as ReplicaGrouping  # what ir.replica_grouping() returns

float = float32  # noqa: A001 (PopXL's alias)
double = float64

__all__ = ["Ir", "Session", "Graph", "Tensor", "Constant", "Variable", "RemoteBuffer", "HostToDeviceStream",
           "DeviceToHostStream", "ReplicaGrouping", "in_sequence", "gcg", "variable", "constant", "remote_buffer",
           "replica_sharded_buffer", "remote_variable", "remote_replica_sharded_variable",
           "replica_sharded_variable", "h2d_stream", "d2h_stream", "ops", "dtypes", "transforms", "graph_input",
           "graph_output", "TensorSpec"]

# PopXL's other top-level names: an error naming them, not silently missing.
_POPXL_NAMES = frozenset("""subgraph_input subgraph_output gmg io_tiles merge_exchange name_scope ipu
transfer_ad float8_143 float8_152 replica_grouping_from_assignments tensor_like Profile""".split())


def __getattr__(name):
    if name in _POPXL_NAMES:
        raise AttributeError(f"popxl.{name} is not supported by weft.popxl; it has Ir, Session, in_sequence, variable, "
                             "constant, remote_buffer, replica_sharded_buffer, remote_variable, "
                             "remote_replica_sharded_variable, replica_sharded_variable, h2d_stream, d2h_stream, "
                             "graph_input, graph_output, TensorSpec, ops, transforms (autodiff) and dtypes")
    raise AttributeError(f"module 'weft.popxl' has no attribute {name!r}")
