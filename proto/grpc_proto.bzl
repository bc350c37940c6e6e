"""C++ code generation for a .proto with the system protoc and gRPC plugin."""

load("@rules_cc//cc:defs.bzl", "cc_library")

def grpc_cc_proto(name, proto):
    """A cc_library `name` with the messages and gRPC stubs of `proto`."""
    base = proto[:-len(".proto")]
    generated = [base + ext for ext in [".pb.cc", ".pb.h", ".grpc.pb.cc", ".grpc.pb.h"]]
    native.genrule(
        name = name + "_gen",
        srcs = [proto],
        outs = generated,
        cmd = " ".join([
            "protoc",
            "--proto_path=.",
            "--cpp_out=$(GENDIR)",
            "--grpc_out=$(GENDIR)",
            "--plugin=protoc-gen-grpc=$$(command -v grpc_cpp_plugin)",
            "$(location " + proto + ")",
        ]),
    )
    cc_library(
        name = name,
        srcs = [f for f in generated if f.endswith(".cc")],
        hdrs = [f for f in generated if f.endswith(".h")],
        deps = ["@sys//:grpc"],
    )
