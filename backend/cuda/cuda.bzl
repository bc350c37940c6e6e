"""Bazel macros for the CUDA backend.

Every macro here creates its targets only when the CUDA Toolkit was found
(`@local_cuda//:defs.bzl`'s CUDA_AVAILABLE); without it they create nothing,
so a machine without the toolkit builds everything else.
"""

load("@local_cuda//:defs.bzl", "CUDA_AVAILABLE")
load("@rules_cc//cc:defs.bzl", "cc_library")

# Device code for sm_80 (A100) and sm_90 (H100) only, to keep builds short.
NVCC_FLAGS = [
    "-std=c++20",
    "-O3",
    "--expt-relaxed-constexpr",
    "--compiler-options=-fPIC",
    "-gencode=arch=compute_80,code=sm_80",
    "-gencode=arch=compute_90,code=sm_90",
]

def cuda_only(rule, **kwargs):
    """Calls `rule(**kwargs)` when the CUDA Toolkit is available."""
    if CUDA_AVAILABLE:
        rule(**kwargs)

def if_cuda(if_true, if_false = []):
    """`if_true` when the CUDA Toolkit is available, else `if_false`.

    For attributes of targets outside this package, e.g. the registry's
    `deps = [...] + if_cuda(["//backend/cuda:cuda_device"])` and
    `local_defines = if_cuda(["TESSERA_HAVE_CUDA"])`.
    """
    return if_true if CUDA_AVAILABLE else if_false

def cuda_library(name, cu_srcs, cu_hdrs = [], srcs = [], hdrs = [], deps = [], **kwargs):
    """A cc_library whose `cu_srcs` are compiled by nvcc, one genrule each.

    `cu_hdrs` are the headers the .cu files include (paths from the
    workspace root). The objects link into the library with `srcs`, `hdrs`
    and `deps`, plus the CUDA runtime and libraries.
    """
    if not CUDA_AVAILABLE:
        return
    objs = []
    for src in cu_srcs:
        stem = src[:-len(".cu")]
        obj = "_nvcc/%s/%s.pic.o" % (name, stem)
        native.genrule(
            name = "%s_nvcc_%s" % (name, stem.replace("/", "_")),
            srcs = [src] + cu_hdrs,
            outs = [obj],
            tools = ["@local_cuda//:nvcc"],
            # nvcc finds its own installation from its real path, not from
            # the repository's symlink to it.
            cmd = " ".join([
                "$$(readlink -f $(location @local_cuda//:nvcc))",
                " ".join(NVCC_FLAGS),
                "-I.",
                "-I$(GENDIR)",
                "-c $(location %s)" % src,
                "-o $@",
            ]),
            message = "nvcc %s" % src,
        )
        objs.append(obj)
    cc_library(
        name = name,
        srcs = srcs + objs,
        hdrs = hdrs,
        deps = deps + ["@local_cuda//:cuda"],
        **kwargs
    )
