"""A repository rule that exposes system libraries found by pkg-config.

Each entry of `packages` maps a Bazel target name to a list of pkg-config
module names; an entry starting with "-" is a link flag for a library that
ships no .pc file. The generated repository has one `cc_library` per target whose
`linkopts` and `defines` come from `pkg-config --libs/--cflags`. Include
directories outside /usr/include are linked into the repository so that
`includes` can name them.
"""

def _words(text):
    return [w for w in text.replace("\n", " ").split(" ") if w]

def _run(ctx, args):
    result = ctx.execute(args)
    if result.return_code != 0:
        fail("%s failed: %s" % (" ".join(args), result.stderr))
    return result.stdout.strip()

def _system_libs_impl(ctx):
    build = ['package(default_visibility = ["//visibility:public"])', ""]
    for name, modules in ctx.attr.packages.items():
        flags = [m for m in modules if m.startswith("-")]
        modules = [m for m in modules if not m.startswith("-")]
        cflags = _words(_run(ctx, ["pkg-config", "--cflags"] + modules))
        libs = flags + _words(_run(ctx, ["pkg-config", "--libs"] + modules))
        defines = [f[2:] for f in cflags if f.startswith("-D")]
        includes = []
        for i, f in enumerate([f for f in cflags if f.startswith("-I")]):
            link = "include_%s_%d" % (name, i)
            ctx.symlink(f[2:], link)
            includes.append(link)
        hdrs = ["glob([\"%s/**\"])" % d for d in includes]
        build.append("cc_library(")
        build.append("    name = %r," % name)
        build.append("    hdrs = %s," % (" + ".join(hdrs) if hdrs else "[]"))
        build.append("    includes = %r," % includes)
        build.append("    defines = %r," % defines)
        build.append("    linkopts = %r," % libs)
        build.append(")")
        build.append("")
    ctx.file("WORKSPACE", "workspace(name = %r)\n" % ctx.name)
    ctx.file("BUILD", "\n".join(build))

system_libs = repository_rule(
    implementation = _system_libs_impl,
    attrs = {"packages": attr.string_list_dict(mandatory = True)},
    local = True,
    environ = ["PKG_CONFIG_PATH"],
)
