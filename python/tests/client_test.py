"""The Python client against real tesserad processes on 127.0.0.1.

The daemon comes from the test's runfiles (//server:tesserad as data) or
from $TESSERAD; it listens on a port the kernel picks and writes it to a
port file, as tests/integration/daemon_process.cc starts it.
"""

import ctypes
import os
import queue
import signal
import subprocess
import sys
import tempfile
import time
import unittest

# The package and its generated modules sit beside this test's folder in
# the runfiles (python/tessera); put them first on the path.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
import grpc  # noqa: E402

import tessera  # noqa: E402
from tessera import F16, F32, I32, Graph, TesseraError  # noqa: E402
from tessera.client import _execute_messages  # noqa: E402


def _die_with_parent():
    # prctl(PR_SET_PDEATHSIG, SIGKILL): the daemon ends with the test.
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def tesserad_path():
    candidates = [os.environ.get("TESSERAD", "")]
    for root in ("TEST_SRCDIR", "RUNFILES_DIR"):
        if os.environ.get(root):
            candidates.append(os.path.join(os.environ[root], "tessera",
                                           "server", "tesserad"))
    for path in candidates:
        if path and os.access(path, os.X_OK):
            return path
    raise FileNotFoundError("no tesserad: set $TESSERAD or run under Bazel")


class Daemon:
    """tesserad --listen=127.0.0.1:0 --port_file=DIR/port FLAGS..."""

    def __init__(self, *flags, timeout=120.0):
        self.dir = tempfile.mkdtemp(prefix="tesserad.",
                                    dir=os.environ.get("TEST_TMPDIR"))
        port_file = os.path.join(self.dir, "port")
        self.process = subprocess.Popen(
            [tesserad_path(), "--listen=127.0.0.1:0",
             f"--port_file={port_file}", *flags],
            preexec_fn=_die_with_parent)
        deadline = time.monotonic() + timeout
        port = 0
        while port == 0:
            if self.process.poll() is not None:
                raise RuntimeError(f"tesserad exited with status "
                                   f"{self.process.returncode} before "
                                   "listening (see its log above)")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"tesserad wrote no port file in {timeout} s")
            try:
                with open(port_file) as f:
                    port = int(f.read().strip() or 0)
            except (FileNotFoundError, ValueError):
                pass
            if port == 0:
                time.sleep(0.005)
        self.address = f"127.0.0.1:{port}"

    def stop(self):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)


def silu(x):
    return x / (1.0 + np.exp(-x))


def softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


class ClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.daemon = Daemon("--devices=cpu:2")
        cls.client = tessera.Client(cls.daemon.address)

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        cls.daemon.stop()

    def assert_close(self, got, want, rtol=1e-5, atol=0.0):
        self.assertEqual(got.shape, want.shape)
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)

    def test_session_and_devices(self):
        c = self.client
        self.assertTrue(c.session)
        self.assertEqual(c.version, tessera.PROTOCOL_VERSION)
        self.assertEqual(c.version, 2)
        self.assertGreater(c.limits.max_queued_executions, 1)
        self.assertGreater(c.limits.max_chunk_bytes, 0)
        devices = c.list_devices()
        names = [d.name for d in devices]
        self.assertEqual(names, ["cpu0", "cpu1"])
        self.assertEqual(devices[0].type, tessera.pb2.DeviceInfo.CPU)
        self.assertTrue(devices[0].buffer_types)

    def test_buffer_round_trip_10mib(self):
        c = self.client
        rng = np.random.default_rng(1)
        data = rng.standard_normal((10 << 20) // 4).astype(np.float32)
        buf = c.alloc_buffer("cpu0", data.nbytes + 4096, usage="weights")
        self.assertGreaterEqual(buf.size, data.nbytes + 4096)
        try:
            # Several chunks of the daemon's max_chunk_bytes.
            self.assertGreater(data.nbytes, 2 * c.limits.max_chunk_bytes)
            self.assertEqual(c.write(buf, 4096, data), data.nbytes)
            back = c.read(buf, 4096, data.shape, np.float32)
            np.testing.assert_array_equal(back, data)
            buf.clear(0)
            self.assertFalse(c.read(buf, 4096, (16,), np.float32).any())
            # Outside the buffer: INVALID_ARGUMENT.
            with self.assertRaises(TesseraError) as e:
                c.read(buf, buf.size - 4, (2,), np.float32)
            self.assertEqual(e.exception.code,
                             grpc.StatusCode.INVALID_ARGUMENT)
        finally:
            buf.free()
        with self.assertRaises(TesseraError) as e:
            buf.free()
        self.assertEqual(e.exception.code, grpc.StatusCode.NOT_FOUND)

    def mlp(self, weights):
        """An MLP with weights in `weights`: returns (graph, x, b1, out,
        numpy reference as a function of x and b1)."""
        rng = np.random.default_rng(2)
        d, hidden, n_out, batch = 64, 96, 16, 8
        w1 = (rng.standard_normal((hidden, d)) / 8).astype(np.float32)
        w2 = (rng.standard_normal((n_out, hidden)) / 8).astype(np.float32)
        self.client.write(weights, 0, w1)
        self.client.write(weights, w1.nbytes, w2)
        eps = 1e-6
        g = Graph()
        x = g.input(F32, [d, batch], name="x")
        b1 = g.input(F32, [hidden], name="b1")
        W1 = g.tensor(F32, [d, hidden], weights, 0, name="w1")
        W2 = g.tensor(F32, [hidden, n_out], weights, w1.nbytes, name="w2")
        h = g.mul_mat(W1, x) + b1
        h = g.rms_norm(g.silu(h), eps)
        out = g.soft_max(g.mul_mat(W2, h), name="out")
        self.assertEqual(out.shape, (batch, n_out))

        def reference(xv, bv):
            xv, bv = xv.astype(np.float64), bv.astype(np.float64)
            hv = silu(xv @ w1.T.astype(np.float64) + bv)
            hv = hv / np.sqrt((hv * hv).mean(axis=-1, keepdims=True) + eps)
            return softmax(hv @ w2.T.astype(np.float64))

        return g, x, b1, out, reference, (batch, d), (hidden,)

    def test_mlp_compute_equals_numpy(self):
        c = self.client
        weights = c.alloc_buffer("cpu0", 1 << 20, usage="weights")
        g, x, b1, out, reference, xs, bs = self.mlp(weights)
        rng = np.random.default_rng(3)
        xv = rng.standard_normal(xs).astype(np.float32)
        bv = rng.standard_normal(bs).astype(np.float32)
        (got,) = c.compute(g, {x: xv, b1: bv}, [out])
        self.assertEqual(got.dtype, np.float32)
        self.assert_close(got, reference(xv, bv), rtol=1e-5, atol=1e-7)
        weights.free()

    def test_registered_graph_pipelined(self):
        c = self.client
        weights = c.alloc_buffer("cpu0", 1 << 20, usage="weights")
        g, x, b1, out, reference, xs, bs = self.mlp(weights)
        rng = np.random.default_rng(4)
        bv = rng.standard_normal(bs).astype(np.float32)
        xvs = [rng.standard_normal(xs).astype(np.float32) for _ in range(8)]
        want = [c.compute(g, {x: xv, b1: bv}, [out])[0] for xv in xvs]
        with c.register_graph(g, n_copies=2, devices=["cpu0", "cpu1"]) as rg:
            self.assertGreaterEqual(rg.n_splits, 1)
            tags = [rg.submit({x: xv, b1: bv}, [out]) for xv in xvs]
            self.assertEqual(tags, list(range(8)))
            got = [rg.receive()[0] for _ in xvs]
            for gv, wv in zip(got, want):
                np.testing.assert_array_equal(gv, wv)
            # One more, the simple way.
            (again,) = rg.execute({x: xvs[0], b1: bv}, [out])
            np.testing.assert_array_equal(again, want[0])
            # An execution's error comes back on its response and the
            # stream stays open: an intermediate (the logits before the
            # softmax) was not flagged output at registration.
            logits = g.tensors[-2]
            self.assertEqual(logits.op, tessera.Op.MUL_MAT)
            with self.assertRaises(TesseraError) as e:
                rg.execute({x: xvs[0], b1: bv}, [logits])
            self.assertEqual(e.exception.code,
                             grpc.StatusCode.INVALID_ARGUMENT)
            self.assertIn("intermediate", e.exception.message)
            (again,) = rg.execute({x: xvs[1], b1: bv}, [out])
            np.testing.assert_array_equal(again, want[1])
        weights.free()

    def test_registered_graph_many_in_flight(self):
        # 48 executions queued before the first is received: over version
        # 2 those queued while the stream is busy go in shared messages,
        # and so do responses that are ready together; each result still
        # belongs to its own input.
        c = self.client
        g = Graph()
        x = g.input(F32, [16], name="x")
        y = g.scale(x, 3.0, name="y")
        rng = np.random.default_rng(5)
        xvs = [rng.standard_normal(16).astype(np.float32) for _ in range(48)]
        with c.register_graph(g) as rg:
            tags = [rg.submit({x: xv}, [y]) for xv in xvs]
            self.assertEqual(tags, list(range(48)))
            for xv in xvs:
                (got,) = rg.receive()
                np.testing.assert_array_equal(got, xv * np.float32(3.0))
            with self.assertRaises(RuntimeError):
                rg.receive()

    def test_malformed_graph_is_invalid_argument(self):
        g = Graph()
        a = g.input(F32, [8, 4])
        b = g.input(F32, [8, 3])
        y = g.mul_mat(a, b, name="y")
        y.ne = [4, 4, 1, 1]  # MUL_MAT derives [4, 3]
        y.nb = [4, 16, 64, 64]
        with self.assertRaises(TesseraError) as e:
            self.client.compute(g, {a: np.zeros((4, 8), np.float32),
                                    b: np.zeros((3, 8), np.float32)}, [y])
        self.assertEqual(e.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("shape", e.exception.message)
        self.assertIn("y", e.exception.message)
        # The builders refuse what the daemon would.
        with self.assertRaises(tessera.GraphError):
            g.mul_mat(a, g.input(F32, [7, 3]))

    def test_ops_equal_numpy(self):
        c = self.client
        rng = np.random.default_rng(5)
        r = lambda *s: rng.standard_normal(s).astype(np.float32)
        g = Graph()
        values = {}

        def inp(v, type_=None):
            t = g.input_like(v) if type_ is None else g.input(
                type_, list(reversed(v.shape)))
            values[t] = v
            return t

        av, bv, rowv = r(3, 4, 6), r(3, 4, 6), r(6)
        a, b, row = inp(av), inp(bv), inp(rowv)
        idxv = np.array([2, 0], np.int32)
        idx = inp(idxv)
        cases = []

        def case(t, want, rtol=1e-5, atol=1e-6):
            cases.append((t, want, rtol, atol))

        case(a - b, av - bv)
        case(a * row, av * rowv)
        case(a / (g.sqr(b) + row), av / (bv * bv + rowv))
        case(g.scale(a, 0.5, 1.0), av * 0.5 + 1.0)
        case(g.sqrt(g.sqr(a)), np.abs(av))
        case(g.tanh(a), np.tanh(av))
        case(g.neg(g.relu(a)), -np.maximum(av, 0))
        case(g.sigmoid(a), 1 / (1 + np.exp(-av)))
        case(g.exp(a), np.exp(av))
        case(g.gelu(a), 0.5 * av * (1 + np.tanh(
            np.sqrt(2 / np.pi) * (av + 0.044715 * av ** 3))), atol=1e-5)
        case(g.glu(a, b), silu(av) * bv)
        case(g.swiglu(a), silu(av[..., :3]) * av[..., 3:])
        case(g.norm(a, 1e-5), (av - av.mean(-1, keepdims=True)) /
             np.sqrt(av.var(-1, keepdims=True) + 1e-5), rtol=1e-4, atol=1e-5)
        case(g.sum_rows(a), av.sum(-1, keepdims=True), atol=1e-5)
        case(g.mean(a), av.mean(-1, keepdims=True))
        case(g.cont(g.transpose(a)), av.transpose(0, 2, 1))
        case(g.transpose(a), av.transpose(0, 2, 1))  # a strided output
        # ggml_permute(0, 2, 1, 3): ne axes 1 and 2 swap.
        case(g.cont(g.permute(a, 0, 2, 1, 3)), av.transpose(1, 0, 2))
        case(g.reshape(a, [12, 6]), av.reshape(6, 12))
        m = g.reshape(a, [6, 12])  # numpy (12, 6)
        case(g.get_rows(m, idx), av.reshape(12, 6)[idxv])
        case(g.view(m, [6, 2], [m.nb[1]], offset=m.nb[1] * 3),
             av.reshape(12, 6)[3:5])
        case(g.concat(a, b, 1), np.concatenate([av, bv], axis=1))
        case(g.concat(a, b, 0), np.concatenate([av, bv], axis=2))
        case(g.soft_max(a, scale=0.5), softmax(av * 0.5))
        # SET_ROWS into an F32 leaf.
        dstv, srcv = r(5, 6), r(2, 6)
        setv = dstv.copy()
        setv[idxv] = srcv
        case(g.set_rows(inp(dstv), inp(srcv), idx), setv)
        # CPY to F16 (the destination is an input too: Compute wants all).
        cpyv = r(5, 6)
        case(g.cpy(inp(cpyv), inp(np.zeros((5, 6), np.float16))),
             cpyv.astype(np.float16), rtol=1e-3)
        # ROPE (normal mode) on [head_dim 8, heads 2, tokens 4].
        qv = r(4, 2, 8)
        posv = np.array([0, 1, 2, 5], np.int32)
        theta = posv[:, None] * 10000.0 ** (-np.arange(0, 8, 2) / 8)
        cos, sin = np.cos(theta)[:, None, :], np.sin(theta)[:, None, :]
        x0, x1 = qv[..., 0::2], qv[..., 1::2]
        ropev = np.empty_like(qv)
        ropev[..., 0::2] = x0 * cos - x1 * sin
        ropev[..., 1::2] = x0 * sin + x1 * cos
        case(g.rope(inp(qv), inp(posv), 8), ropev, rtol=1e-4, atol=1e-5)
        # FLASH_ATTN_EXT: q [d 8, n_q 3, h 4, 1], k/v [8, n_kv 5, h_kv 2, 1].
        fq, fk, fv = r(1, 4, 3, 8), r(1, 2, 5, 8), r(1, 2, 5, 8)
        kk, vv = np.repeat(fk, 2, axis=1), np.repeat(fv, 2, axis=1)
        att = softmax(fq @ kk.transpose(0, 1, 3, 2) * 0.3) @ vv
        case(g.flash_attn_ext(inp(fq), inp(fk), inp(fv), scale=0.3),
             att.transpose(0, 2, 1, 3), rtol=1e-4, atol=1e-5)

        self.assertEqual(set(values), set(g.inputs))
        got = c.compute(g, values, [t for t, *_ in cases])
        for (t, want, rtol, atol), gv in zip(cases, got):
            with self.subTest(op=t.op.name, ne=t.ne):
                self.assert_close(gv, want.astype(gv.dtype).reshape(t.shape),
                                  rtol, atol)

    def test_f16_and_raw_types(self):
        c = self.client
        g = Graph()
        xv = np.linspace(-2, 2, 64, dtype=np.float32).reshape(2, 32)
        x = g.input(F16, [32, 2])
        y = g.scale(x, 2.0)
        (got,) = c.compute(g, {x: xv}, [y])  # converted to float16
        self.assertEqual(got.dtype, np.float16)
        np.testing.assert_array_equal(got, xv.astype(np.float16) * 2)
        # Q8_0 as raw bytes: one block of scale 0.5 and values 0..31.
        block = np.float16(0.5).tobytes() + bytes(range(32))
        g = Graph()
        q = g.input(tessera.Q8_0, [32])
        dst = g.input(F32, [32])
        out = g.cpy(q, dst)
        zeros = np.zeros(32, np.float32)
        (got,) = c.compute(g, {q: block, dst: zeros}, [out])
        np.testing.assert_array_equal(got, np.arange(32) * 0.5)
        (raw,) = c.compute(g, {q: block, dst: zeros}, [q])
        self.assertEqual(raw.dtype, np.uint8)
        self.assertEqual(raw.tobytes(), block)


class MetaDeviceTest(unittest.TestCase):
    def test_meta_device_lists_its_members(self):
        daemon = Daemon("--devices=cpu:2,tp0=meta(cpu0,cpu1)", "--threads=1")
        try:
            with tessera.Client(daemon.address) as c:
                devices = {d.name: d for d in c.list_devices()}
                self.assertEqual(sorted(devices), ["cpu0", "cpu1", "tp0"])
                tp0 = devices["tp0"]
                self.assertEqual(tp0.type, tessera.pb2.DeviceInfo.META)
                self.assertEqual(list(tp0.members), ["cpu0", "cpu1"])
                self.assertEqual(list(devices["cpu0"].members), [])
                # Bytes written without a split state are mirrored: they
                # read back as written.
                buf = c.alloc_buffer("tp0", 4096, usage="weights")
                c.write(buf, 0, np.arange(8, dtype=np.float32))
                np.testing.assert_array_equal(
                    c.read(buf, 0, (8,), np.float32), np.arange(8))
        finally:
            daemon.stop()


class TokenTest(unittest.TestCase):
    def test_bearer_token(self):
        token = "s3cret-token"
        path = os.path.join(os.environ.get("TEST_TMPDIR", "/tmp"),
                            f"token.{os.getpid()}")
        with open(path, "w") as f:
            f.write(token)
        daemon = Daemon("--devices=cpu", f"--token_file={path}")
        try:
            for bad in (None, "wrong"):
                with self.assertRaises(TesseraError) as e:
                    tessera.Client(daemon.address, token=bad)
                self.assertEqual(e.exception.code,
                                 grpc.StatusCode.UNAUTHENTICATED)
            with tessera.Client(daemon.address, token=token) as c:
                self.assertEqual([d.name for d in c.list_devices()], ["cpu0"])
                buf = c.alloc_buffer("cpu0", 4096)
                c.write(buf, 0, np.arange(8, dtype=np.int32))
                np.testing.assert_array_equal(
                    c.read(buf, 0, (8,), np.int32), np.arange(8))
        finally:
            daemon.stop()

    def test_tls_with_token(self):
        """A throwaway CA and a server certificate for 127.0.0.1 made by
        the openssl command, as tests/integration/test_certs.cc makes them."""
        d = tempfile.mkdtemp(prefix="certs.", dir=os.environ.get("TEST_TMPDIR"))
        p = lambda name: os.path.join(d, name)
        key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
               "-nodes"]
        with open(p("san.ext"), "w") as f:
            f.write("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
        for cmd in (
                ["req", "-x509", *key, "-keyout", p("ca.key"), "-out",
                 p("ca.pem"), "-days", "2", "-subj", "/CN=tessera-test-ca"],
                ["req", *key, "-keyout", p("server.key"), "-out",
                 p("server.csr"), "-subj", "/CN=localhost"],
                ["x509", "-req", "-in", p("server.csr"), "-CA", p("ca.pem"),
                 "-CAkey", p("ca.key"), "-CAcreateserial", "-days", "2",
                 "-extfile", p("san.ext"), "-out", p("server.pem")]):
            subprocess.run(["openssl", *cmd], check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with open(p("token"), "w") as f:
            f.write("tls-token")
        with open(p("ca.pem"), "rb") as f:
            ca = f.read()
        daemon = Daemon("--devices=cpu", f"--tls_cert={p('server.pem')}",
                        f"--tls_key={p('server.key')}",
                        f"--token_file={p('token')}")
        try:
            with tessera.Client(daemon.address, token="tls-token", tls=True,
                                root_certs=ca) as c:
                self.assertEqual([d.name for d in c.list_devices()], ["cpu0"])
            with self.assertRaises(TesseraError) as e:  # plaintext to TLS
                tessera.Client(daemon.address, token="tls-token",
                               connect_timeout=1.0)
            self.assertEqual(e.exception.code, grpc.StatusCode.UNAVAILABLE)
        finally:
            daemon.stop()


class ExecuteMessagesTest(unittest.TestCase):
    """How RegisteredGraph packs queued executions into Execute messages
    (tessera.client._execute_messages), without a daemon."""

    @staticmethod
    def queued(*requests):
        q = queue.Queue()
        for r in requests:
            q.put(r)
        return q

    @staticmethod
    def request(tag, nbytes=0):
        r = tessera.pb2.ExecuteRequest(session="s", graph=1, tag=tag)
        if nbytes:
            r.inputs.add(id=0, data=bytes(nbytes))
        return r

    @staticmethod
    def tags(message):
        return [message.tag] + [m.tag for m in message.more]

    def test_queued_executions_share_messages(self):
        q = self.queued(*[self.request(t) for t in range(40)], None)
        messages = list(_execute_messages(q, 16, 1 << 20))
        self.assertEqual([self.tags(m) for m in messages],
                         [list(range(0, 16)), list(range(16, 32)),
                          list(range(32, 40))])
        for m in messages:
            self.assertEqual(m.max_responses_per_message, 64)
            for inner in m.more:
                self.assertEqual(len(inner.more), 0)

    def test_bytes_bound_a_message(self):
        size = self.request(0, 1000).ByteSize()
        q = self.queued(self.request(0, 1000), self.request(1, 1000),
                        self.request(2, 1000), self.request(3, 5000),
                        self.request(4, 1000), None)
        # Room for three and the framing that nests two of them in `more`,
        # not for a fourth; the large one goes alone.
        messages = list(_execute_messages(q, 16, 3 * size + 64))
        self.assertEqual([self.tags(m) for m in messages],
                         [[0, 1, 2], [3], [4]])

    def test_one_per_message_without_version_2(self):
        q = self.queued(*[self.request(t) for t in range(3)], None)
        messages = list(_execute_messages(q, 1, 1 << 20))
        self.assertEqual([self.tags(m) for m in messages], [[0], [1], [2]])
        for m in messages:
            self.assertEqual(m.max_responses_per_message, 0)

    def test_a_lone_execution_does_not_wait(self):
        q = self.queued(self.request(0))
        messages = _execute_messages(q, 16, 1 << 20)
        self.assertEqual(self.tags(next(messages)), [0])
        q.put(self.request(1))
        q.put(self.request(2))
        self.assertEqual(self.tags(next(messages)), [1, 2])
        q.put(None)
        self.assertEqual(list(messages), [])


if __name__ == "__main__":
    unittest.main()
