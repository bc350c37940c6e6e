"""A fuzz target that is also a short test.

`bazel test` builds it with the standalone driver (standalone_driver.cc):
the seed corpus, then seconds of seeded random mutations. Under
`--config=fuzz` (clang, libFuzzer, ASan and UBSan) it is a libFuzzer binary:

    bazel run --config=fuzz //tests/fuzz:NAME -- -max_total_time=600 \\
        /tmp/NAME_corpus $PWD/tests/fuzz/corpus/NAME
"""

load("@rules_cc//cc:defs.bzl", "cc_test")

def tessera_fuzz_test(name, deps):
    cc_test(
        name = name,
        size = "small",
        srcs = [name + ".cc"],
        args = ["tests/fuzz/corpus/" + name],
        data = native.glob(["corpus/" + name + "/*"]),
        linkopts = select({
            "//tests/fuzz:libfuzzer": ["-fsanitize=fuzzer"],
            "//conditions:default": [],
        }),
        deps = deps + select({
            "//tests/fuzz:libfuzzer": [],
            "//conditions:default": ["//tests/fuzz:standalone_driver"],
        }),
    )
