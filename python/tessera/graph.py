"""Graphs of ops built in Python and encoded as tessera.v1.GraphDef.

Shapes follow ggml (graph/ops.h): `ne` lists the dimensions innermost
first, so a numpy array of shape (rows, cols) is a tensor with
ne = [cols, rows]. Every builder derives its result's type, shape, strides
and op_params exactly as the C++ builder does, since the daemon re-derives
each node (ValidateNode) and refuses one that differs; a builder raises
GraphError (a ValueError) where the C++ one would return INVALID_ARGUMENT.

    g = Graph()
    x = g.input(F32, [64, 8], name="x")          # numpy shape (8, 64)
    w = g.input(F32, [64, 32], name="w")         # numpy shape (32, 64)
    y = g.soft_max(g.relu(g.mul_mat(w, x)))      # ne [32, 8]

A Graph holds every tensor made through it, in the order made (so each
source comes before its users); each tensor with an op is a node, computed
in that order.
"""

import struct

import numpy as np

from . import types as ty
from .types import Op, Type

MAX_DIMS = 4
MAX_SRC = 10
MAX_OP_PARAMS = 16
# The types FLASH_ATTN_EXT reads keys and values in (graph/op_types.h).
_ATTN_KV_TYPES = (Type.F32, Type.F16, Type.BF16, Type.Q8_0, Type.Q4_0,
                  Type.Q4_1, Type.Q5_0, Type.Q5_1)


class GraphError(ValueError):
    """A builder's inputs do not fit its op (INVALID_ARGUMENT in C++)."""


def _error(op, *parts):
    return GraphError(f"[{op}] " + "".join(str(p) for p in parts))


def _f32_bits(x):
    """The int32 whose bits are float32(x) (op_params hold floats so)."""
    return struct.unpack("<i", struct.pack("<f", float(x)))[0]


def _bits_f32(i):
    return struct.unpack("<f", struct.pack("<i", int(i)))[0]


def _contiguous_strides(type_, ne):
    nb = [0] * MAX_DIMS
    nb[0] = ty.type_size(type_)
    nb[1] = nb[0] * (ne[0] // ty.block_size(type_))
    for i in range(2, MAX_DIMS):
        nb[i] = nb[i - 1] * ne[i - 1]
    return nb


def _shape4(ne, op):
    ne = [int(n) for n in ne]
    if not 1 <= len(ne) <= MAX_DIMS:
        raise _error(op, "needs 1 to 4 dimensions, got ", len(ne))
    if any(n < 0 for n in ne):
        raise _error(op, "negative dimension in ", ne)
    return ne + [1] * (MAX_DIMS - len(ne))


def _divides(small, big):
    return big == 0 if small == 0 else big % small == 0


class Tensor:
    """One tensor of a Graph: type, shape (ne), byte strides (nb), the op
    that produces it with its op_params and sources, the tensor it views,
    and where its data lies on the daemon (for leafs in a buffer)."""

    __slots__ = ("graph", "id", "type", "ne", "nb", "op", "op_params", "src",
                 "view_src", "view_offs", "name", "flags", "data", "__weakref__")

    def __init__(self, graph, type_, ne, nb=None, name=""):
        self.graph = graph
        self.id = None
        self.type = Type(type_)
        self.ne = list(ne)
        self.nb = list(nb) if nb is not None else _contiguous_strides(
            self.type, self.ne)
        self.op = Op.NONE
        self.op_params = [0] * MAX_OP_PARAMS
        self.src = [None] * MAX_SRC
        self.view_src = None
        self.view_offs = 0
        self.name = name
        self.flags = 0
        self.data = None  # (buffer handle, offset) for leafs in a buffer

    # --- properties -------------------------------------------------------

    @property
    def n_dims(self):
        """ggml_n_dims: 1 + the last dimension above 1."""
        for i in range(MAX_DIMS - 1, 0, -1):
            if self.ne[i] != 1:
                return i + 1
        return 1

    @property
    def shape(self):
        """The numpy shape (outermost first) of the first n_dims dims."""
        return tuple(reversed(self.ne[:self.n_dims]))

    @property
    def n_elements(self):
        return self.ne[0] * self.ne[1] * self.ne[2] * self.ne[3]

    @property
    def nbytes(self):
        """Bytes spanned from the first to one past the last element
        (ggml_nbytes)."""
        if any(n <= 0 for n in self.ne):
            return 0
        bs, ts = ty.block_size(self.type), ty.type_size(self.type)
        if bs == 1:
            return ts + sum((self.ne[i] - 1) * self.nb[i] for i in range(4))
        return self.ne[0] * self.nb[0] // bs + sum(
            (self.ne[i] - 1) * self.nb[i] for i in range(1, 4))

    def is_contiguous(self):
        ts, bs = ty.type_size(self.type), ty.block_size(self.type)
        nxt = ts
        if self.ne[0] != bs and self.nb[0] != nxt:
            return False
        nxt *= self.ne[0] // bs
        for i in range(1, MAX_DIMS):
            if self.ne[i] != 1:
                if self.nb[i] != nxt:
                    return False
                nxt *= self.ne[i]
        return True

    def has_contiguous_rows(self):
        return (self.ne[0] == ty.block_size(self.type) or
                self.nb[0] == ty.type_size(self.type))

    def is_transposed(self):
        return self.nb[0] > self.nb[1]

    def param_f32(self, i):
        return _bits_f32(self.op_params[i])

    def describe(self):
        return f"{self.name or '(unnamed)'} {self.type.name.lower()} {self.ne}"

    def __repr__(self):
        return f"<Tensor {self.describe()} op={self.op.name}>"

    # --- operators --------------------------------------------------------

    def __add__(self, other):
        return self.graph.add(self, other)

    def __sub__(self, other):
        return self.graph.sub(self, other)

    def __mul__(self, other):
        return self.graph.mul(self, other)

    def __truediv__(self, other):
        return self.graph.div(self, other)


class Graph:
    """A graph under construction: tensors in creation order."""

    def __init__(self):
        self.tensors = []

    # --- leafs ------------------------------------------------------------

    def _add(self, t):
        if t.graph is not self:
            raise GraphError("tensor belongs to another graph")
        t.id = len(self.tensors)
        self.tensors.append(t)
        return t

    def _check(self, op, what, t):
        if not isinstance(t, Tensor):
            raise _error(op, what, " is not a Tensor (got ", type(t).__name__,
                         ")")
        if t.graph is not self:
            raise _error(op, what, " ", t.describe(),
                         " belongs to another graph")
        if t.ne[0] % ty.block_size(t.type) != 0:
            raise _error(op, what, " ", t.describe(),
                         ": ne[0] is not a multiple of the block size")

    def _leaf(self, type_, ne, name, op):
        type_ = Type(type_)
        ne = _shape4(ne, op)
        if ne[0] % ty.block_size(type_) != 0:
            raise _error(op, "ne[0] = ", ne[0],
                         " is not a multiple of the block size of ",
                         type_.name.lower())
        return self._add(Tensor(self, type_, ne, name=name))

    def input(self, type_, ne, name=""):
        """A leaf whose data each compute or execution provides."""
        return self._leaf(type_, ne, name, "input")

    def tensor(self, type_, ne, buffer, offset=0, name="", param=True):
        """A leaf whose data already lies in a session buffer (weights,
        caches): `buffer` is a Buffer or a handle, `offset` bytes into it."""
        t = self._leaf(type_, ne, name, "tensor")
        handle = getattr(buffer, "handle", buffer)
        t.data = (int(handle), int(offset))
        if param:
            t.flags |= ty.FLAG_PARAM
        return t

    def input_like(self, array, name=""):
        """An input with the type and shape of a numpy array."""
        array = np.asarray(array)
        return self.input(ty.type_of(array.dtype), list(reversed(array.shape))
                          or [1], name)

    # --- results ----------------------------------------------------------

    def _result(self, op, type_, ne, srcs, name=""):
        t = Tensor(self, type_, ne, name=name)
        t.op = op
        for i, s in enumerate(srcs):
            t.src[i] = s
        return self._add(t)

    def _view(self, a, op, type_, ne, nb, offset, srcs, name=""):
        t = Tensor(self, type_, ne, nb, name=name)
        if a.view_src is not None:
            t.view_src, t.view_offs = a.view_src, a.view_offs + offset
        else:
            t.view_src, t.view_offs = a, offset
        t.op = op
        for i, s in enumerate(srcs):
            t.src[i] = s
        return self._add(t)

    # DUP, CONT: a contiguous copy with a's type and shape.
    def _copy(self, op, opname, a, name):
        self._check(opname, "a", a)
        if ty.is_quantized(a.type) and not a.has_contiguous_rows():
            raise _error(opname, "quantized a ", a.describe(),
                         " must have contiguous rows")
        return self._result(op, a.type, a.ne, [a], name)

    def dup(self, a, name=""):
        return self._copy(Op.DUP, "Dup", a, name)

    def cont(self, a, name=""):
        return self._copy(Op.CONT, "Cont", a, name)

    def cpy(self, a, b, name=""):
        """Copies `a` into `b` converting type; a view of `b`."""
        op = "Cpy"
        self._check(op, "a", a)
        self._check(op, "b", b)
        if a.n_elements != b.n_elements:
            raise _error(op, "a ", a.ne, " and b ", b.ne,
                         " differ in element count")
        if ty.is_quantized(a.type) and b.type != Type.F32:
            raise _error(op, "quantized a can only be copied to f32")
        if ty.is_quantized(b.type):
            if not ty.is_float(a.type):
                raise _error(op, "only f32, f16 or bf16 can be quantized")
            if a.ne[0] % ty.block_size(b.type) != 0:
                raise _error(op, "a's rows are not whole blocks of ",
                             b.type.name.lower())
        return self._view(b, Op.CPY, b.type, b.ne, b.nb, 0, [a, b], name)

    def _binary(self, op, opname, a, b, name):
        self._check(opname, "a", a)
        self._check(opname, "b", b)
        if not ty.is_float(a.type):
            raise _error(opname, "a must be f32, f16 or bf16, got ",
                         a.type.name.lower())
        if b.type != Type.F32 and b.type != a.type:
            raise _error(opname, "b must be f32 or a's type")
        if b.n_elements == 0:
            ok = a.n_elements == 0
        else:
            ok = all(b.ne[i] > 0 and a.ne[i] % b.ne[i] == 0 for i in range(4))
        if not ok:
            raise _error(opname, "b ", b.ne, " does not broadcast to a ", a.ne)
        return self._result(op, a.type, a.ne, [a, b], name)

    def add(self, a, b, name=""):
        return self._binary(Op.ADD, "Add", a, b, name)

    def sub(self, a, b, name=""):
        return self._binary(Op.SUB, "Sub", a, b, name)

    def mul(self, a, b, name=""):
        return self._binary(Op.MUL, "Mul", a, b, name)

    def div(self, a, b, name=""):
        return self._binary(Op.DIV, "Div", a, b, name)

    def _float_elementwise(self, op, opname, a, name):
        self._check(opname, "a", a)
        if not ty.is_float(a.type):
            raise _error(opname, "a must be f32, f16 or bf16, got ",
                         a.type.name.lower())
        return self._result(op, a.type, a.ne, [a], name)

    def scale(self, a, s, bias=0.0, name=""):
        """a * s + bias."""
        t = self._float_elementwise(Op.SCALE, "Scale", a, name)
        t.op_params[0] = _f32_bits(s)
        t.op_params[1] = _f32_bits(bias)
        return t

    def sqr(self, a, name=""):
        return self._float_elementwise(Op.SQR, "Sqr", a, name)

    def sqrt(self, a, name=""):
        return self._float_elementwise(Op.SQRT, "Sqrt", a, name)

    def log(self, a, name=""):
        return self._float_elementwise(Op.LOG, "Log", a, name)

    def _row_reduce(self, op, opname, a, name):
        self._check(opname, "a", a)
        if a.type != Type.F32:
            raise _error(opname, "a must be f32")
        return self._result(op, Type.F32, [1] + a.ne[1:], [a], name)

    def sum_rows(self, a, name=""):
        return self._row_reduce(Op.SUM_ROWS, "SumRows", a, name)

    def mean(self, a, name=""):
        return self._row_reduce(Op.MEAN, "Mean", a, name)

    def argmax(self, a, name=""):
        op = "Argmax"
        self._check(op, "a", a)
        if a.type != Type.F32:
            raise _error(op, "a must be f32")
        if a.ne[2] != 1 or a.ne[3] != 1:
            raise _error(op, "a ", a.ne, " must be a matrix")
        return self._result(Op.ARGMAX, Type.I32, [a.ne[1], 1, 1, 1], [a],
                            name)

    def unary(self, a, op, name=""):
        op = ty.UnaryOp(op)
        t = self._float_elementwise(Op.UNARY, f"Unary {op.name}", a, name)
        t.op_params[0] = int(op)
        return t

    def neg(self, a, name=""):
        return self.unary(a, ty.UnaryOp.NEG, name)

    def relu(self, a, name=""):
        return self.unary(a, ty.UnaryOp.RELU, name)

    def gelu(self, a, name=""):
        return self.unary(a, ty.UnaryOp.GELU, name)

    def silu(self, a, name=""):
        return self.unary(a, ty.UnaryOp.SILU, name)

    def sigmoid(self, a, name=""):
        return self.unary(a, ty.UnaryOp.SIGMOID, name)

    def tanh(self, a, name=""):
        return self.unary(a, ty.UnaryOp.TANH, name)

    def exp(self, a, name=""):
        return self.unary(a, ty.UnaryOp.EXP, name)

    def glu(self, a, b=None, op=ty.GluOp.SWIGLU, swapped=False, name=""):
        """act(a) * b; without b, a [2n, ...] splits in halves x, g (swapped:
        the other way) and the result [n, ...] is act(x) * g."""
        op = ty.GluOp(op)
        opname = f"Glu {op.name}"
        if b is None:
            opname = f"GluSplit {op.name}"
            self._check(opname, "a", a)
            if not ty.is_float(a.type):
                raise _error(opname, "a must be f32, f16 or bf16")
            if a.ne[0] % 2 != 0:
                raise _error(opname, "a ", a.ne, " has an odd ne[0]")
            t = self._result(Op.GLU, a.type, [a.ne[0] // 2] + a.ne[1:], [a],
                             name)
            t.op_params[0] = int(op)
            t.op_params[1] = 1 if swapped else 0
            return t
        self._check(opname, "a", a)
        self._check(opname, "b", b)
        if not ty.is_float(a.type):
            raise _error(opname, "a must be f32, f16 or bf16")
        if b.type != a.type or b.ne != a.ne:
            raise _error(opname, "b ", b.describe(), " must match a ",
                         a.describe(), " in type and shape")
        t = self._result(Op.GLU, a.type, a.ne, [a, b], name)
        t.op_params[0] = int(op)
        return t

    def swiglu(self, a, b=None, name=""):
        return self.glu(a, b, ty.GluOp.SWIGLU, name=name)

    def geglu(self, a, b=None, name=""):
        return self.glu(a, b, ty.GluOp.GEGLU, name=name)

    def _row_norm(self, op, opname, a, eps, name):
        self._check(opname, "a", a)
        if a.type != Type.F32:
            raise _error(opname, "a must be f32")
        if not eps >= 0.0:
            raise _error(opname, "eps must be >= 0, got ", eps)
        t = self._result(op, a.type, a.ne, [a], name)
        t.op_params[0] = _f32_bits(eps)
        return t

    def norm(self, a, eps=1e-5, name=""):
        return self._row_norm(Op.NORM, "Norm", a, eps, name)

    def rms_norm(self, a, eps=1e-6, name=""):
        return self._row_norm(Op.RMS_NORM, "RmsNorm", a, eps, name)

    def mul_mat(self, a, b, name=""):
        """a [k, m, a2, a3] (any type), b F32 [k, n, b2, b3] -> F32
        [m, n, b2, b3]: result row j, column i = dot(a row i, b row j), i.e.
        numpy's b @ a.T."""
        op = "MulMat"
        self._check(op, "a", a)
        self._check(op, "b", b)
        if b.type != Type.F32:
            raise _error(op, "b must be f32, got ", b.type.name.lower())
        if not a.has_contiguous_rows() or a.is_transposed():
            raise _error(op, "a ", a.describe(),
                         " must have contiguous rows and not be transposed")
        if a.ne[0] != b.ne[0]:
            raise _error(op, "a ", a.ne, " and b ", b.ne, " differ in ne[0]")
        if not _divides(a.ne[2], b.ne[2]) or not _divides(a.ne[3], b.ne[3]):
            raise _error(op, "a ", a.ne,
                         " does not broadcast over dims 2 and 3 of b ", b.ne)
        return self._result(Op.MUL_MAT, Type.F32,
                            [a.ne[1], b.ne[1], b.ne[2], b.ne[3]], [a, b], name)

    def get_rows(self, a, b, name=""):
        """Rows b (I32 [n, a2, a3]) of a [n0, r, a2, a3] -> [n0, n, a2, a3],
        F32 (I32 when a is I32)."""
        op = "GetRows"
        self._check(op, "a", a)
        self._check(op, "b", b)
        if b.type != Type.I32:
            raise _error(op, "b must be i32")
        if b.ne[1] != a.ne[2] or b.ne[2] != a.ne[3] or b.ne[3] != 1:
            raise _error(op, "indices b ", b.ne, " must be [n, ", a.ne[2],
                         ", ", a.ne[3], ", 1] for a ", a.ne)
        type_ = Type.I32 if a.type == Type.I32 else Type.F32
        return self._result(Op.GET_ROWS, type_,
                            [a.ne[0], b.ne[0], b.ne[1], b.ne[2]], [a, b], name)

    def set_rows(self, a, b, c, name=""):
        """Writes the rows of b (F32 [n0, n, b2, b3]) into a at the I32
        indices c [n, c1, c2]; a view of a."""
        op = "SetRows"
        for what, t in (("a", a), ("b", b), ("c", c)):
            self._check(op, what, t)
        if a.type == Type.I32:
            raise _error(op, "a must be f32, f16, bf16 or quantized")
        if b.type != Type.F32:
            raise _error(op, "b must be f32")
        if c.type != Type.I32:
            raise _error(op, "c must be i32")
        if a.ne[0] != b.ne[0] or a.ne[2] != b.ne[2] or a.ne[3] != b.ne[3]:
            raise _error(op, "b ", b.ne, " must be [", a.ne[0], ", n, ",
                         a.ne[2], ", ", a.ne[3], "] for a ", a.ne)
        if (c.ne[0] != b.ne[1] or c.ne[3] != 1 or
                not _divides(c.ne[1], b.ne[2]) or
                not _divides(c.ne[2], b.ne[3])):
            raise _error(op, "indices c ", c.ne, " do not fit b ", b.ne)
        if not a.has_contiguous_rows() or not b.has_contiguous_rows():
            raise _error(op, "a and b must have contiguous rows")
        return self._view(a, Op.SET_ROWS, a.type, a.ne, a.nb, 0, [b, c], name)

    def view(self, a, ne, nb=(), offset=0, name=""):
        """A view of a with shape ne and byte strides nb (nb[1..]: one fewer
        than ne; nb[0] is implied) starting `offset` bytes into a."""
        op = "View"
        self._check(op, "a", a)
        ne = [int(n) for n in ne]
        nb = [int(n) for n in nb]
        if not 1 <= len(ne) <= MAX_DIMS:
            raise _error(op, "needs 1 to 4 dimensions, got ", len(ne))
        if len(nb) != len(ne) - 1:
            raise _error(op, len(ne), " dimensions need ", len(ne) - 1,
                         " strides (nb[1..]), got ", len(nb))
        if any(n < 0 for n in ne):
            raise _error(op, "negative dimension in ", ne)
        ne4 = ne + [1] * (MAX_DIMS - len(ne))
        if ne4[0] % ty.block_size(a.type) != 0:
            raise _error(op, "ne[0] = ", ne4[0],
                         " is not a multiple of the block size")
        nb4 = [ty.type_size(a.type)] + [0] * 3
        for i in range(1, MAX_DIMS):
            nb4[i] = nb[i - 1] if i < len(ne) else nb4[i - 1] * ne4[i - 1]
        probe = Tensor(self, a.type, ne4, nb4)
        if offset < 0 or offset > a.nbytes or probe.nbytes > a.nbytes - offset:
            raise _error(op, "view ", ne4, " at offset ", offset,
                         " does not lie inside a ", a.describe(), " of ",
                         a.nbytes, " bytes")
        t = self._view(a, Op.VIEW, a.type, ne4, nb4, offset, [a], name)
        t.op_params[0] = struct.unpack("<i", struct.pack(
            "<I", offset & 0xFFFFFFFF))[0]
        t.op_params[1] = struct.unpack("<i", struct.pack("<I", offset >> 32))[0]
        return t

    def reshape(self, a, ne, name=""):
        """A contiguous a seen with shape ne (same element count)."""
        op = "Reshape"
        self._check(op, "a", a)
        if not a.is_contiguous():
            raise _error(op, "a ", a.describe(), " must be contiguous")
        shape = _shape4(ne, op)
        if shape[0] * shape[1] * shape[2] * shape[3] != a.n_elements:
            raise _error(op, "a ", a.ne, " has ", a.n_elements,
                         " elements, shape ", list(ne), " has a different count")
        if shape[0] % ty.block_size(a.type) != 0:
            raise _error(op, "ne[0] is not a multiple of the block size")
        return self._view(a, Op.RESHAPE, a.type, shape,
                          _contiguous_strides(a.type, shape), 0, [a], name)

    def permute(self, a, axis0, axis1, axis2, axis3, name=""):
        """Axis i of a becomes axis axes[i] of the result (ggml_permute)."""
        op = "Permute"
        self._check(op, "a", a)
        axes = [axis0, axis1, axis2, axis3]
        if sorted(axes) != [0, 1, 2, 3]:
            raise _error(op, "axes ", axes, " are not a permutation of 0..3")
        if ty.is_quantized(a.type) and axis0 != 0:
            raise _error(op, "quantized a must keep axis 0")
        ne, nb = [0] * 4, [0] * 4
        for i in range(MAX_DIMS):
            ne[axes[i]] = a.ne[i]
            nb[axes[i]] = a.nb[i]
        t = self._view(a, Op.PERMUTE, a.type, ne, nb, 0, [a], name)
        t.op_params[:4] = axes
        return t

    def transpose(self, a, name=""):
        op = "Transpose"
        self._check(op, "a", a)
        if ty.is_quantized(a.type):
            raise _error(op, "quantized a cannot be transposed")
        ne = [a.ne[1], a.ne[0], a.ne[2], a.ne[3]]
        nb = [a.nb[1], a.nb[0], a.nb[2], a.nb[3]]
        t = self._view(a, Op.TRANSPOSE, a.type, ne, nb, 0, [a], name)
        t.op_params[:4] = [1, 0, 2, 3]
        return t

    def _check_mask(self, op, mask, n, rows, x, x_name):
        if mask.type not in (Type.F32, Type.F16):
            raise _error(op, "mask must be f32 or f16")
        if mask.ne[0] != n or mask.ne[1] < rows:
            raise _error(op, "mask ", mask.ne, " must be [", n, ", >= ", rows,
                         ", ...]")
        if (not _divides(mask.ne[2], x.ne[2]) or
                not _divides(mask.ne[3], x.ne[3])):
            raise _error(op, "mask ", mask.ne,
                         " does not broadcast over dims 2 and 3 of ", x_name,
                         " ", x.ne)

    def soft_max(self, a, mask=None, scale=1.0, max_bias=0.0, name=""):
        """softmax over rows of (a * scale + slope * mask)."""
        op = "SoftMax"
        self._check(op, "a", a)
        if a.type != Type.F32:
            raise _error(op, "a must be f32")
        if mask is not None:
            self._check(op, "mask", mask)
            self._check_mask(op, mask, a.ne[0], a.ne[1], a, "a")
        elif max_bias > 0.0:
            raise _error(op, "max_bias > 0 (ALiBi) needs a mask")
        t = self._result(Op.SOFT_MAX, a.type, a.ne, [a, mask], name)
        t.op_params[0] = _f32_bits(scale)
        t.op_params[1] = _f32_bits(max_bias)
        return t

    def rope(self, a, pos, n_dims, mode=ty.ROPE_NORMAL, n_ctx_orig=0,
             freq_base=10000.0, freq_scale=1.0, ext_factor=0.0,
             attn_factor=1.0, beta_fast=32.0, beta_slow=1.0, name=""):
        """Rotary position embedding of a [head_dim, n_head, n_tokens, 1]
        at positions pos (I32 [n_tokens])."""
        op = "Rope"
        self._check(op, "a", a)
        self._check(op, "pos", pos)
        if a.type not in (Type.F32, Type.F16):
            raise _error(op, "a must be f32 or f16")
        if pos.type != Type.I32:
            raise _error(op, "pos must be i32")
        if a.ne[3] != 1:
            raise _error(op, "a ", a.ne,
                         " must be [head_dim, n_head, n_tokens, 1]")
        if pos.ne != [a.ne[2], 1, 1, 1]:
            raise _error(op, "pos ", pos.ne, " must be [", a.ne[2], "]")
        if n_dims <= 0 or n_dims % 2 != 0 or n_dims > a.ne[0]:
            raise _error(op, "n_dims = ", n_dims,
                         " must be even, > 0 and <= head_dim ", a.ne[0])
        if mode not in (ty.ROPE_NORMAL, ty.ROPE_NEOX):
            raise _error(op, "mode ", mode, " is neither normal (0) nor NeoX (2)")
        t = self._result(Op.ROPE, a.type, a.ne, [a, pos], name)
        p = t.op_params
        p[1], p[2], p[4] = int(n_dims), int(mode), int(n_ctx_orig)
        for i, v in zip(range(5, 11), (freq_base, freq_scale, ext_factor,
                                       attn_factor, beta_fast, beta_slow)):
            p[i] = _f32_bits(v)
        return t

    def concat(self, a, b, dim, name=""):
        op = "Concat"
        self._check(op, "a", a)
        self._check(op, "b", b)
        if not 0 <= dim < MAX_DIMS:
            raise _error(op, "invalid dim ", dim)
        if a.type != b.type or ty.is_quantized(a.type):
            raise _error(op, "a and b must have the same non-quantized type")
        ne = []
        for i in range(MAX_DIMS):
            if i == dim:
                ne.append(a.ne[i] + b.ne[i])
            elif a.ne[i] != b.ne[i]:
                raise _error(op, "a ", a.ne, " and b ", b.ne,
                             " differ outside dim ", dim)
            else:
                ne.append(a.ne[i])
        t = self._result(Op.CONCAT, a.type, ne, [a, b], name)
        t.op_params[0] = int(dim)
        return t

    def argsort(self, a, order=ty.SortOrder.ASCENDING, name=""):
        op = "Argsort"
        order = ty.SortOrder(order)
        self._check(op, "a", a)
        if a.type != Type.F32:
            raise _error(op, "a must be f32")
        t = self._result(Op.ARGSORT, Type.I32, a.ne, [a], name)
        t.op_params[0] = int(order)
        return t

    def flash_attn_ext(self, q, k, v, mask=None, scale=1.0, max_bias=0.0,
                       logit_softcap=0.0, name=""):
        """softmax(q k^T * scale + slope * mask) v: q F32 [d, n_q, h, b],
        k [d, n_kv, h_kv, b], v [d_v, n_kv, h_kv, b] -> F32 [d_v, h, n_q, b]."""
        op = "FlashAttnExt"
        for what, t in (("q", q), ("k", k), ("v", v)):
            self._check(op, what, t)
        if q.type != Type.F32:
            raise _error(op, "q must be f32")
        for what, t in (("k", k), ("v", v)):
            if t.type not in _ATTN_KV_TYPES:
                raise _error(op, what, " must be f32, f16, bf16, q8_0, q4_0,"
                             " q4_1, q5_0 or q5_1")
        if k.ne[0] != q.ne[0]:
            raise _error(op, "k ", k.ne, " and q ", q.ne,
                         " differ in head size ne[0]")
        if v.ne[1:] != k.ne[1:]:
            raise _error(op, "v ", v.ne, " must match k ", k.ne,
                         " in dims 1..3")
        if not _divides(k.ne[2], q.ne[2]) or k.ne[3] != q.ne[3]:
            raise _error(op, "k ", k.ne, " must have a number of heads that "
                         "divides q's and q's batch: q ", q.ne)
        if mask is not None:
            self._check(op, "mask", mask)
            self._check_mask(op, mask, k.ne[1], q.ne[1], q, "q")
        elif max_bias > 0.0:
            raise _error(op, "max_bias > 0 (ALiBi) needs a mask")
        t = self._result(Op.FLASH_ATTN_EXT, Type.F32,
                         [v.ne[0], q.ne[2], q.ne[1], q.ne[3]], [q, k, v, mask],
                         name)
        t.op_params[0] = _f32_bits(scale)
        t.op_params[1] = _f32_bits(max_bias)
        t.op_params[2] = _f32_bits(logit_softcap)
        return t

    # --- wire -------------------------------------------------------------

    @property
    def inputs(self):
        """Leafs without data: what each compute or execution provides."""
        return [t for t in self.tensors if t.op == Op.NONE and t.data is None]

    def to_proto(self, pb2, outputs=()):
        """The GraphDef of every tensor, ids in creation order; `outputs`
        are flagged output (kept whole in registered graphs)."""
        out_ids = {self._own(t, "output").id for t in outputs}
        gd = pb2.GraphDef()
        for t in self.tensors:
            td = gd.tensors.add()
            td.id = t.id
            td.type = int(t.type)
            td.ne.extend(t.ne)
            td.nb.extend(t.nb)
            td.name = t.name
            td.flags = t.flags | (ty.FLAG_OUTPUT if t.id in out_ids else 0)
            if t.op != Op.NONE:
                td.op = int(t.op)
                n = MAX_OP_PARAMS
                while n > 0 and t.op_params[n - 1] == 0:
                    n -= 1
                td.op_params.extend(t.op_params[:n])
                n = MAX_SRC
                while n > 0 and t.src[n - 1] is None:
                    n -= 1
                td.src.extend(-1 if s is None else s.id for s in t.src[:n])
                if t.view_src is not None:
                    td.view_src = t.view_src.id
                    td.view_offs = t.view_offs
            if t.data is not None:
                td.data.buffer, td.data.offset = t.data
        return gd

    def _own(self, t, what):
        if not isinstance(t, Tensor) or t.graph is not self:
            raise GraphError(f"{what} {t!r} is not a tensor of this graph")
        return t
