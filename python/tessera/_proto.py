"""The generated tessera.v1 modules (protoc --python_out and
--grpc_python_out, built by //python:tessera_py_proto).

Under Bazel they sit beside this file in the runfiles. From the source
tree, `bazel build //python:tessera` puts them in bazel-bin/python/tessera,
which is then added to this package's path.
"""

import os
import sys

try:
    from . import tessera_pb2 as pb2
    from . import tessera_pb2_grpc as pb2_grpc
except ImportError:
    _here = os.path.dirname(os.path.abspath(__file__))
    _generated = os.path.join(os.path.dirname(os.path.dirname(_here)),
                              "bazel-bin", "python", "tessera")
    if not os.path.isdir(_generated):
        raise ImportError(
            "tessera's generated protocol modules are missing: run "
            "`bazel build //python:tessera` first") from None
    sys.modules[__package__].__path__.append(_generated)
    from . import tessera_pb2 as pb2  # noqa: E402
    from . import tessera_pb2_grpc as pb2_grpc  # noqa: E402
