"""A session on a tesserad daemon (proto/tessera.proto, package tessera.v1).

    with Client("127.0.0.1:50051") as c:
        print([d.name for d in c.list_devices()])
        buf = c.alloc_buffer("cpu0", 1 << 20, usage="weights")
        c.write(buf, 0, np.arange(1024, dtype=np.float32))
        back = c.read(buf, 0, (1024,), np.float32)

Errors raise TesseraError with the daemon's status code (a
grpc.StatusCode) and message. Calls may come from several threads.
"""

import collections
import logging
import queue
import threading

import grpc
import numpy as np

from . import types as ty
from ._proto import pb2, pb2_grpc
from .graph import Graph, Tensor

# The protocol versions this client speaks; Hello settles on the newest
# both sides do (Client.version).
MIN_PROTOCOL_VERSION = 1
PROTOCOL_VERSION = 2

# Version 2: the most executions one Execute message carries either way.
_MAX_EXECUTIONS_PER_MESSAGE = 64

_log = logging.getLogger("tessera")

_USAGES = {
    "any": pb2.BUFFER_USAGE_ANY,
    "weights": pb2.BUFFER_USAGE_WEIGHTS,
    "compute": pb2.BUFFER_USAGE_COMPUTE,
}

# google.rpc codes by number (ExecuteResponse.status_code).
_CODES = {c.value[0]: c for c in grpc.StatusCode}


class TesseraError(Exception):
    """A call failed: `code` is a grpc.StatusCode, `message` the daemon's."""

    def __init__(self, code, message):
        super().__init__(f"{code.name}: {message}")
        self.code = code
        self.message = message


def _rpc_error(e):
    return TesseraError(e.code(), e.details() or "")


class Buffer:
    """A buffer of the session on one of the daemon's devices."""

    def __init__(self, client, handle, size, alignment, device):
        self.client = client
        self.handle = handle
        self.size = size
        self.alignment = alignment
        self.device = device

    def free(self):
        self.client.free_buffer(self)

    def clear(self, value=0):
        self.client.clear_buffer(self, value)

    def __repr__(self):
        return f"<Buffer {self.handle} on {self.device}: {self.size} bytes>"


def _handle(buffer):
    return int(getattr(buffer, "handle", buffer))


def _as_bytes_of(t, value):
    """The bytes of input `t` from a numpy array (or bytes for raw types),
    converted to t's type where numpy holds it."""
    dtype = ty.numpy_dtype(t.type)
    if isinstance(value, (bytes, bytearray, memoryview)):
        data = bytes(value)
    else:
        arr = np.asarray(value)
        if dtype is None or arr.dtype == np.uint8:
            data = np.ascontiguousarray(arr).tobytes()
        else:
            if arr.dtype != dtype:
                same_kind = (np.issubdtype(arr.dtype, np.floating)
                             if np.issubdtype(dtype, np.floating) else
                             np.issubdtype(arr.dtype, np.integer))
                if not same_kind:
                    raise TypeError(f"input {t.describe()} takes {dtype}, "
                                    f"got {arr.dtype}")
            squeeze = lambda s: tuple(d for d in s if d != 1)
            if squeeze(arr.shape) != squeeze(t.shape):
                raise ValueError(f"input {t.describe()} takes numpy shape "
                                 f"{t.shape}, got {arr.shape}")
            data = np.ascontiguousarray(arr, dtype=dtype).tobytes()
    if len(data) != t.nbytes:
        raise ValueError(f"input {t.describe()} takes {t.nbytes} bytes, "
                         f"got {len(data)}")
    return data


def _array_of(t, data):
    """A tensor's returned bytes as a numpy array of its numpy shape (a raw
    uint8 array for types numpy lacks)."""
    dtype = ty.numpy_dtype(t.type)
    raw = np.frombuffer(data, dtype=np.uint8)
    if dtype is None:
        return raw.copy()
    if t.is_contiguous():
        return raw.view(dtype).reshape(t.shape).copy()
    # A strided view (transpose, permute): the bytes span its strides.
    shape = tuple(reversed(t.ne))
    strides = tuple(reversed(t.nb))
    full = np.lib.stride_tricks.as_strided(raw.view(dtype), shape=shape,
                                           strides=strides)
    return np.array(full).reshape(t.shape)


class Client:
    """A session on a daemon: Hello, then an Attach stream held by a
    background thread until close() (CloseSession)."""

    def __init__(self, target, token=None, tls=False, root_certs=None,
                 client_cert=None, client_key=None, server_name=None,
                 name="tessera-python", connect_timeout=30.0):
        """Connects to `target` ("host:port"). `token` is sent as
        `authorization: Bearer TOKEN`; with `tls`, `root_certs` (PEM bytes;
        None: the system's roots) verify the daemon, `client_cert` and
        `client_key` are for mutual TLS, `server_name` overrides the name
        the certificate must carry."""
        options = [("grpc.max_receive_message_length", -1),
                   ("grpc.max_send_message_length", -1)]
        if server_name:
            options.append(("grpc.ssl_target_name_override", server_name))
        if tls:
            enc = lambda x: x.encode() if isinstance(x, str) else x
            creds = grpc.ssl_channel_credentials(
                root_certificates=enc(root_certs),
                private_key=enc(client_key),
                certificate_chain=enc(client_cert))
            self._channel = grpc.secure_channel(target, creds, options)
        else:
            self._channel = grpc.insecure_channel(target, options)
        self._stub = pb2_grpc.TesseraStub(self._channel)
        self._md = (("authorization", f"Bearer {token}"),) if token else ()
        self.session = None
        self._attach = None
        self._attach_thread = None
        self._closed = False
        self.draining = False
        try:
            self._hello(name, connect_timeout)
        except BaseException:
            self._channel.close()
            raise
        self._start_attach()

    def _hello(self, name, timeout):
        request = pb2.HelloRequest(min_version=MIN_PROTOCOL_VERSION,
                                   max_version=PROTOCOL_VERSION,
                                   client_name=name)
        try:
            grpc.channel_ready_future(self._channel).result(timeout=timeout)
            wait = timeout
        except grpc.FutureTimeoutError:
            wait = 5.0  # one Hello that does not wait tells why
        try:
            response = self._stub.Hello(request, timeout=wait,
                                        metadata=self._md)
        except grpc.RpcError as e:
            raise _rpc_error(e) from None
        self.session = response.session
        self.version = response.version
        self.server_version = response.server_version
        self.limits = response.limits

    def _start_attach(self):
        self._attach = self._stub.Attach(
            pb2.AttachRequest(session=self.session), metadata=self._md)

        def read():
            try:
                for event in self._attach:
                    if event.kind == pb2.AttachEvent.DRAINING:
                        self.draining = True
                        _log.info("session %s: the daemon is draining",
                                  self.session)
            except grpc.RpcError as e:
                if e.code() != grpc.StatusCode.CANCELLED:
                    _log.warning("session %s: attach stream ended: %s",
                                 self.session, e.details())

        self._attach_thread = threading.Thread(
            target=read, name="tessera-attach", daemon=True)
        self._attach_thread.start()

    def close(self):
        """Closes the session (the daemon frees its buffers and graphs)."""
        if self._closed:
            return
        self._closed = True
        try:
            self._stub.CloseSession(
                pb2.CloseSessionRequest(session=self.session), timeout=30,
                metadata=self._md)
        except grpc.RpcError as e:
            _log.warning("closing session %s: %s", self.session, e.details())
        self._attach.cancel()
        self._attach_thread.join()
        self._channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _call(self, method, request, **kwargs):
        try:
            return method(request, metadata=self._md, **kwargs)
        except grpc.RpcError as e:
            raise _rpc_error(e) from None

    # --- devices and buffers ----------------------------------------------

    def list_devices(self):
        """The daemon's devices (tessera.v1.DeviceInfo messages); a META
        device (a tensor-parallel device) names its member devices in
        `members`, rank 0 first."""
        return list(self._call(self._stub.ListDevices, pb2.ListDevicesRequest(
            session=self.session)).devices)

    def alloc_buffer(self, device, size, usage="any", buffer_type=""):
        """A buffer of `size` bytes on `device`; usage "any", "weights" or
        "compute" (or a pb2.BufferUsage value)."""
        usage = _USAGES.get(usage, usage)
        r = self._call(self._stub.AllocBuffer, pb2.AllocBufferRequest(
            session=self.session, device=device, size=int(size), usage=usage,
            buffer_type=buffer_type))
        return Buffer(self, r.buffer, r.size, r.alignment, device)

    def free_buffer(self, buffer):
        self._call(self._stub.FreeBuffer, pb2.FreeBufferRequest(
            session=self.session, buffer=_handle(buffer)))

    def clear_buffer(self, buffer, value=0):
        self._call(self._stub.ClearBuffer, pb2.ClearBufferRequest(
            session=self.session, buffer=_handle(buffer), value=int(value)))

    def get_alloc_size(self, device, type_, ne):
        return self._call(self._stub.GetAllocSize, pb2.GetAllocSizeRequest(
            session=self.session, device=device, type=int(type_),
            ne=[int(n) for n in ne])).size

    # --- tensor data --------------------------------------------------------

    def _chunk_bytes(self):
        return max(1, int(self.limits.max_chunk_bytes) or (1 << 20))

    def write(self, buffer, offset, array):
        """Writes the bytes of `array` (any numpy array, or bytes) at `offset`
        of `buffer`, in chunks of the daemon's max_chunk_bytes. Returns the
        bytes written."""
        if isinstance(array, (bytes, bytearray, memoryview)):
            view = memoryview(array).cast("B")
        else:
            view = memoryview(np.ascontiguousarray(array)).cast("B")
        size = view.nbytes
        chunk = self._chunk_bytes()

        def requests():
            yield pb2.WriteTensorRequest(header=pb2.WriteTensorRequest.Header(
                session=self.session,
                dst=pb2.TensorRef(buffer=_handle(buffer), offset=int(offset)),
                size=size))
            for start in range(0, size, chunk):
                yield pb2.WriteTensorRequest(
                    chunk=view[start:start + chunk].tobytes())

        return self._call(self._stub.WriteTensor, requests()).bytes_written

    def read_bytes(self, buffer, offset, size):
        """`size` bytes at `offset` of `buffer`."""
        out = bytearray(size)
        pos = 0
        try:
            for r in self._stub.ReadTensor(pb2.ReadTensorRequest(
                    session=self.session,
                    src=pb2.TensorRef(buffer=_handle(buffer),
                                      offset=int(offset)),
                    size=int(size)), metadata=self._md):
                n = len(r.chunk)
                if pos + n > size:
                    raise TesseraError(grpc.StatusCode.DATA_LOSS,
                                       "the daemon sent more bytes than asked")
                out[pos:pos + n] = r.chunk
                pos += n
        except grpc.RpcError as e:
            raise _rpc_error(e) from None
        if pos != size:
            raise TesseraError(grpc.StatusCode.DATA_LOSS,
                               f"the daemon sent {pos} of {size} bytes")
        return out

    def read(self, buffer, offset, shape, dtype=np.float32):
        """A numpy array of `shape` and `dtype` read from `offset` of
        `buffer`."""
        dtype = np.dtype(dtype)
        shape = tuple(shape) if np.iterable(shape) else (int(shape),)
        size = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        data = self.read_bytes(buffer, offset, size)
        return np.frombuffer(data, dtype=dtype).reshape(shape)

    def memset(self, buffer, offset, size, value=0):
        self._call(self._stub.MemsetTensor, pb2.MemsetTensorRequest(
            session=self.session,
            dst=pb2.TensorRef(buffer=_handle(buffer), offset=int(offset)),
            size=int(size), value=int(value)))

    def copy(self, src, src_offset, dst, dst_offset, size):
        """Copies `size` bytes between two of the session's buffers."""
        self._call(self._stub.CopyTensor, pb2.CopyTensorRequest(
            session=self.session,
            src=pb2.TensorRef(buffer=_handle(src), offset=int(src_offset)),
            dst=pb2.TensorRef(buffer=_handle(dst), offset=int(dst_offset)),
            size=int(size)))

    # --- graphs -------------------------------------------------------------

    def compute(self, graph, inputs=None, outputs=()):
        """Computes `graph` once: `inputs` maps its input tensors to numpy
        arrays (sent inline); returns the `outputs` tensors as numpy arrays
        (their numpy shape, Tensor.shape), in order."""
        outputs = list(outputs)
        request = pb2.ComputeRequest(session=self.session,
                                     graph=graph.to_proto(pb2))
        _add_inputs(graph, inputs, request.inputs)
        request.outputs.extend(graph._own(t, "output").id for t in outputs)
        response = self._call(self._stub.Compute, request)
        return _outputs_of(outputs, response.outputs)

    def register_graph(self, graph, n_copies=1, devices=(), outputs=()):
        """Registers `graph` for executions, `n_copies` (1 to 4) in flight
        at once, over `devices` (highest priority first; empty: all).
        `outputs` are tensors to read besides the graph's final nodes (an
        intermediate's memory is otherwise reused)."""
        request = pb2.RegisterGraphRequest(
            session=self.session, graph=graph.to_proto(pb2, outputs),
            n_copies=int(n_copies), devices=list(devices))
        r = self._call(self._stub.RegisterGraph, request)
        return RegisteredGraph(self, graph, r.graph, r.n_splits,
                               dict(r.compute_buffer_bytes))

    def release_graph(self, handle):
        self._call(self._stub.ReleaseGraph, pb2.ReleaseGraphRequest(
            session=self.session, graph=int(handle)))


def _add_inputs(graph, inputs, out):
    for t, value in (inputs or {}).items():
        graph._own(t, "input")
        if t.op != ty.Op.NONE or t.data is not None:
            raise ValueError(f"{t.describe()} is not an input (a leaf "
                             "without data)")
        out.add(id=t.id, data=_as_bytes_of(t, value))


def _outputs_of(outputs, results):
    if len(results) != len(outputs):
        raise TesseraError(grpc.StatusCode.DATA_LOSS,
                           f"asked for {len(outputs)} outputs, got "
                           f"{len(results)}")
    arrays = []
    for t, r in zip(outputs, results):
        if r.id != t.id or len(r.data) != t.nbytes:
            raise TesseraError(grpc.StatusCode.DATA_LOSS,
                               f"output {t.describe()}: got tensor {r.id} of "
                               f"{len(r.data)} bytes")
        arrays.append(_array_of(t, r.data))
    return arrays


# No request held back (_execute_messages).
_NOTHING = object()


def _execute_messages(requests, max_executions, max_bytes):
    """The Execute stream's messages from `requests`, a queue.Queue of
    ExecuteRequests ended by None. Each message is the oldest request
    waiting with, in its `more` (protocol version 2), those queued behind
    it by then, up to `max_executions` requests and `max_bytes` bytes (a
    larger request goes alone). Nothing waits for company: a lone request
    goes at once. With `max_executions` 1, each goes alone and responses
    come one per message."""
    next_one = requests.get()
    while next_one is not None:
        first, next_one = next_one, _NOTHING
        if max_executions > 1:
            first.max_responses_per_message = _MAX_EXECUTIONS_PER_MESSAGE
        size = first.ByteSize()
        while len(first.more) + 1 < max_executions:
            try:
                request = requests.get_nowait()
            except queue.Empty:
                break
            if request is None:
                next_one = request  # the end
                break
            request_size = request.ByteSize()
            if size + request_size > max_bytes:
                next_one = request  # the next message's first
                break
            size += request_size
            first.more.append(request)
        yield first
        if next_one is _NOTHING:
            next_one = requests.get()


class RegisteredGraph:
    """A graph the daemon placed and allocated once for many executions,
    run over an Execute stream: execute() for one at a time, submit() then
    receive() (in order) to keep several in flight. Over protocol version
    2, executions submitted while the stream is busy travel together, and
    so do their responses."""

    def __init__(self, client, graph, handle, n_splits, compute_buffer_bytes):
        self.client = client
        self.graph = graph
        self.handle = handle
        self.n_splits = n_splits
        self.compute_buffer_bytes = compute_buffer_bytes
        self._requests = None
        self._responses = None
        self._pending = collections.deque()  # (tag, outputs), in order
        # Responses read off the stream and not yet received: a message and
        # those in its `more`, in order.
        self._received = collections.deque()
        self._next_tag = 0
        self._submit_lock = threading.Lock()
        self._receive_lock = threading.Lock()

    def _open(self):
        if self._requests is None:
            # As many executions per message as the C++ client holds: half
            # the daemon's queue for a stream (at most 16) and a quarter of
            # its largest message.
            limits = self.client.limits
            max_executions = 1
            if self.client.version >= 2:
                max_executions = min(
                    16, max(1, limits.max_queued_executions // 2))
            max_bytes = limits.max_message_bytes // 4 or (1 << 62)
            self._requests = queue.Queue()
            self._responses = self.client._stub.Execute(
                _execute_messages(self._requests, max_executions, max_bytes),
                metadata=self.client._md)

    def submit(self, inputs=None, outputs=()):
        """Queues an execution with `inputs` ({tensor: array}) asking for
        `outputs`; returns its tag. Results come from receive(), in order."""
        outputs = list(outputs)
        request = pb2.ExecuteRequest(session=self.client.session,
                                     graph=self.handle)
        _add_inputs(self.graph, inputs, request.inputs)
        request.outputs.extend(self.graph._own(t, "output").id
                               for t in outputs)
        with self._submit_lock:
            self._open()
            tag = self._next_tag
            self._next_tag += 1
            request.tag = tag
            self._pending.append((tag, outputs))
            self._requests.put(request)
        return tag

    def receive(self):
        """The outputs of the oldest execution not yet received, as numpy
        arrays. Raises TesseraError with the execution's status."""
        with self._receive_lock:
            if not self._pending:
                raise RuntimeError("no execution in flight")
            tag, outputs = self._pending.popleft()
            if not self._received:
                try:
                    response = next(self._responses)
                except grpc.RpcError as e:
                    raise _rpc_error(e) from None
                except StopIteration:
                    raise TesseraError(grpc.StatusCode.UNAVAILABLE,
                                       "the Execute stream ended") from None
                self._received.append(response)
                self._received.extend(response.more)
            response = self._received.popleft()
        if response.tag != tag:
            raise TesseraError(grpc.StatusCode.DATA_LOSS,
                               f"response tag {response.tag}, expected {tag}")
        if response.status_code != 0:
            raise TesseraError(_CODES.get(response.status_code,
                                          grpc.StatusCode.UNKNOWN),
                               response.status_message)
        return _outputs_of(outputs, response.outputs)

    def execute(self, inputs=None, outputs=()):
        """One execution: submit() and receive()."""
        self.submit(inputs, outputs)
        return self.receive()

    def close_stream(self):
        """Ends the Execute stream (a later submit opens another)."""
        with self._submit_lock, self._receive_lock:
            if self._requests is not None:
                self._requests.put(None)
                self._responses.cancel()
                self._requests = self._responses = None
                self._pending.clear()
                self._received.clear()

    def release(self):
        """Ends the stream and frees the graph on the daemon."""
        self.close_stream()
        self.client.release_graph(self.handle)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()
