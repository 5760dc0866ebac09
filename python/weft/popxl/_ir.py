"""popxl.Ir: the replication settings, the main graph, and the weft.Session that holds the Ir's state.

`Ir(replication=R)` holds R replicas in this process; `Ir(replication="popdist")` takes the job's: under a
launcher (weftrun, or its `poprun` name) every instance holds its share of the job's replicas, as PopDist
configures PopXL from PopRun's environment. The Ir's variables, remote buffers and streams live in a
weft.Session (weft/_session.py, over the C++ Session): weft.popxl adds no second implementation of them.

The weft.Session fixes num_host_transfers when it is made, while PopXL sets `ir.num_host_transfers` after
the graph is built. So the Ir keeps a log of the state it created; when popxl.Session(ir) finds a different
count, it makes a new weft.Session with it and replays the log (each handle gets its new weft object).
"""
import weft as _weft

from ._graph import Graph


class _SessionOptions:
    """The fields of PopART's SessionOptions that PopDist sets and PopXL code reads (ir._pb_ir.getSessionOptions())."""

    def __init__(self, session):
        local, total = session.instance_replication_factor, session.replication_factor
        self.globalReplicaOffset = session.global_replica_offset
        self.globalReplicationFactor = total
        self.replicatedGraphCount = local
        self.enableReplicatedGraphs = local > 1
        self.enableDistributedReplicatedGraphs = local != total


class _PbIr:
    """The part of PopART's C++ Ir (popxl's ir._pb_ir) that PopXL code reads: getSessionOptions()."""

    def __init__(self, ir):
        self._ir = ir

    def getSessionOptions(self):
        return _SessionOptions(self._ir._session)


class Ir:
    """popxl.Ir(replication=1 | R | "popdist")."""

    def __init__(self, replication=1):
        if replication == "popdist":
            replicas = 0  # every device this process holds: the job's share under a launcher
        elif isinstance(replication, int) and not isinstance(replication, bool) and replication >= 1:
            replicas = replication
            runtime = _weft.runtime()
            if runtime.process_count == 1 and len(runtime.devices()) < replicas:
                _weft.init(device_count=replicas)  # one process: a device per replica
        else:
            raise ValueError(f"popxl.Ir: replication={replication!r} is neither a number of replicas >= 1 nor "
                             "'popdist' (the launcher's replicas)")
        self._replicas = replicas
        self._num_host_transfers = 1
        self._session = _weft.Session(replication_factor=replicas, name="popxl.Ir")
        self._log = []  # (handle, make): handle._weft = make(session), in creation order
        self._has_session = False
        self.main_graph = Graph(self, "main_graph")
        self._graph_count = 0  # subgraphs made (their names: fn_subgraph(k))
        self._pb_ir = _PbIr(self)

    # ---- replication -------------------------------------------------------------------------------------
    replication_factor = property(lambda self: self._session.replication_factor,
                                  doc="The global replica count R (every instance's replicas).")
    instance_replication_factor = property(lambda self: self._session.instance_replication_factor,
                                           doc="The replicas of this process (R / instances).")
    global_replica_offset = property(lambda self: self._session.global_replica_offset,
                                     doc="The global index of this process's first replica.")

    def replica_grouping(self, stride=1, group_size=None):
        """Groups of `group_size` replicas `stride` apart over the global replicas (None: R // stride)."""
        return self._session.replica_grouping(stride, group_size)

    @property
    def num_host_transfers(self):
        return self._num_host_transfers

    @num_host_transfers.setter
    def num_host_transfers(self, value):
        if self._has_session:
            raise ValueError("popxl.Ir.num_host_transfers: set it before making the popxl.Session (PopXL fixes it "
                             "when the session is made)")
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"popxl.Ir.num_host_transfers: {value!r} is not an integer >= 1")
        self._num_host_transfers = value

    # ---- state -------------------------------------------------------------------------------------------
    def _make(self, handle, make):
        """Creates state on the Ir's weft.Session now (its errors are raised here, where PopXL raises them)
        and logs how, for a replay."""
        if self._has_session:
            raise ValueError(f"popxl: {type(handle).__name__} created after popxl.Session(ir): weft.popxl creates "
                             "state before the session, as PopXL does")
        handle._weft = make(self._session)
        self._log.append((handle, make))
        return handle

    def _freeze(self):
        """popxl.Session(ir): the weft.Session with ir.num_host_transfers (replayed when it changed)."""
        if self._has_session:
            raise ValueError("popxl.Session: this Ir already has a session (weft.popxl makes one per Ir)")
        if self._num_host_transfers != self._session.num_host_transfers:
            self._session = _weft.Session(replication_factor=self._replicas,
                                          num_host_transfers=self._num_host_transfers, name="popxl.Ir")
            for handle, make in self._log:
                handle._weft = make(self._session)
        self._has_session = True
        return self._session

    # ---- graphs ------------------------------------------------------------------------------------------
    def create_graph(self, fn, *args, **kwargs):
        """A subgraph: fn recorded with a graph input for each Tensor / TensorSpec argument, its returned
        tensors the outputs (_subgraph.py); call it with ops.call, differentiate it with
        popxl.transforms.autodiff."""
        from ._subgraph import create_graph
        return create_graph(self, fn, *args, **kwargs)

    def __repr__(self):
        return f"popxl.Ir(replication_factor={self.replication_factor})"
