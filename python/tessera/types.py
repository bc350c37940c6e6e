"""Element types, ops and flags with their wire values (graph/type.h,
graph/tensor.h)."""

import enum

import numpy as np


class Type(enum.IntEnum):
    """tessera::Type. The values are the wire's TensorDef.type."""

    F32 = 0
    F16 = 1
    BF16 = 2
    I32 = 3
    Q8_0 = 4  # ggml block_q8_0: fp16 scale + 32 int8 (34 bytes / 32 values)
    Q4_0 = 5  # ggml block_q4_0: fp16 scale + 16 bytes of nibbles (18 / 32)
    Q4_K = 6  # 144 bytes / 256 values
    Q5_K = 7  # 176 bytes / 256 values
    Q6_K = 8  # 210 bytes / 256 values
    I64 = 9  # row ids
    Q4_1 = 10  # ggml block_q4_1: fp16 scale, fp16 minimum + 16 bytes (20 / 32)
    Q5_0 = 11  # ggml block_q5_0: fp16 scale + 4 bytes fifth bits + 16 (22)
    Q5_1 = 12  # ggml block_q5_1: fp16 scale, fp16 minimum + 4 + 16 (24)
    Q2_K = 13  # 84 bytes / 256 values
    Q3_K = 14  # 110 bytes / 256 values


F32, F16, BF16, I32 = Type.F32, Type.F16, Type.BF16, Type.I32
Q8_0, Q4_0, Q4_K, Q5_K, Q6_K = (Type.Q8_0, Type.Q4_0, Type.Q4_K, Type.Q5_K,
                                Type.Q6_K)
Q4_1, Q5_0, Q5_1 = Type.Q4_1, Type.Q5_0, Type.Q5_1
Q2_K, Q3_K = Type.Q2_K, Type.Q3_K

# (values per block, bytes per block, quantized), as graph/type.cc's table.
_TRAITS = {
    Type.F32: (1, 4, False),
    Type.F16: (1, 2, False),
    Type.BF16: (1, 2, False),
    Type.I32: (1, 4, False),
    Type.Q8_0: (32, 34, True),
    Type.Q4_0: (32, 18, True),
    Type.Q4_K: (256, 144, True),
    Type.Q5_K: (256, 176, True),
    Type.Q6_K: (256, 210, True),
    Type.I64: (1, 8, False),
    Type.Q4_1: (32, 20, True),
    Type.Q5_0: (32, 22, True),
    Type.Q5_1: (32, 24, True),
    Type.Q2_K: (256, 84, True),
    Type.Q3_K: (256, 110, True),
}

# numpy dtypes of the types numpy holds natively. The others (BF16 and the
# block types) travel as raw bytes: uint8 arrays of the tensor's byte size,
# or uint16 arrays of BF16's bits.
_NUMPY = {
    Type.F32: np.dtype(np.float32),
    Type.F16: np.dtype(np.float16),
    Type.I32: np.dtype(np.int32),
    Type.I64: np.dtype(np.int64),
}


def block_size(t):
    return _TRAITS[Type(t)][0]


def type_size(t):
    return _TRAITS[Type(t)][1]


def is_quantized(t):
    return _TRAITS[Type(t)][2]


def is_float(t):
    return Type(t) in (Type.F32, Type.F16, Type.BF16)


def row_size(t, n):
    """Bytes of `n` values of type `t` (n a multiple of the block size)."""
    bs, ts, _ = _TRAITS[Type(t)]
    return ts * (n // bs)


def numpy_dtype(t):
    """The numpy dtype of type `t`, or None for types kept as raw bytes."""
    return _NUMPY.get(Type(t))


def type_of(dtype):
    """The tessera Type of a numpy dtype (float32, float16, int32)."""
    dtype = np.dtype(dtype)
    for t, d in _NUMPY.items():
        if d == dtype:
            return t
    raise TypeError(f"no tessera type for numpy dtype {dtype}; "
                    "use float32, float16 or int32, or raw bytes (uint8)")


class Op(enum.IntEnum):
    """tessera::Op. The values are the wire's TensorDef.op."""

    NONE = 0
    DUP = 1
    CPY = 2
    CONT = 3
    ADD = 4
    SUB = 5
    MUL = 6
    DIV = 7
    SCALE = 8
    SQR = 9
    SQRT = 10
    LOG = 11
    SUM_ROWS = 12
    MEAN = 13
    ARGMAX = 14
    UNARY = 15
    GLU = 16
    NORM = 17
    RMS_NORM = 18
    MUL_MAT = 19
    GET_ROWS = 20
    SET_ROWS = 21
    VIEW = 22
    RESHAPE = 23
    PERMUTE = 24
    TRANSPOSE = 25
    SOFT_MAX = 26
    ROPE = 27
    CONCAT = 28
    ARGSORT = 29
    FLASH_ATTN_EXT = 30


class UnaryOp(enum.IntEnum):
    """op_params[0] of Op.UNARY."""

    NEG = 0
    RELU = 1
    GELU = 2  # tanh approximation
    SILU = 3
    SIGMOID = 4
    TANH = 5
    EXP = 6


class GluOp(enum.IntEnum):
    """op_params[0] of Op.GLU."""

    SWIGLU = 0
    GEGLU = 1


class SortOrder(enum.IntEnum):
    ASCENDING = 0
    DESCENDING = 1


ROPE_NORMAL = 0
ROPE_NEOX = 2

# TensorDef.flags bits.
FLAG_INPUT = 1
FLAG_OUTPUT = 2
FLAG_PARAM = 4
