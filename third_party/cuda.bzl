"""A repository rule that finds the CUDA Toolkit, if there is one.

The generated `@local_cuda//:defs.bzl` sets `CUDA_AVAILABLE`; BUILD files use
it to build the CUDA backend only where nvcc and the libraries exist. The
toolkit root is $CUDA_PATH, else /usr/local/cuda.
"""

def _local_cuda_impl(ctx):
    root = ctx.os.environ.get("CUDA_PATH", "/usr/local/cuda")
    nvcc = ctx.path(root + "/bin/nvcc")
    available = nvcc.exists and ctx.path(root + "/include/cuda_runtime.h").exists
    ctx.file("WORKSPACE", "workspace(name = %r)\n" % ctx.name)
    ctx.file("defs.bzl", "CUDA_AVAILABLE = %s\nCUDA_ROOT = %r\n" % (available, root))
    build = ['package(default_visibility = ["//visibility:public"])', ""]
    if available:
        ctx.symlink(root + "/include", "include")
        ctx.symlink(nvcc, "nvcc")
        build.append("""
exports_files(["nvcc"])

cc_library(
    name = "cuda",
    hdrs = glob(["include/**/*.h", "include/**/*.hpp"]),
    includes = ["include"],
    linkopts = [
        "-L{root}/lib64",
        "-Wl,-rpath,{root}/lib64",
        "-lcudart",
        "-lcublas",
        "-lnccl",
    ],
)
""".format(root = root))
    ctx.file("BUILD", "\n".join(build))

local_cuda = repository_rule(
    implementation = _local_cuda_impl,
    local = True,
    environ = ["CUDA_PATH"],
)
