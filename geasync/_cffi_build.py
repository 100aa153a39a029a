"""Build script of the native extension ``geasync._twin`` (cffi API mode, C++17).

It compiles the shim (``_native/shim``: the C ABI of ``_native/include/geasync.h`` over the GE v2 / ACL C++ API)
together with the twin (``_native/twin``: a CPU implementation of that API subset with an ONNX engine).
The cdef is read from the C header itself, between its CDEF markers, so declarations exist once.

Environment:
  GEASYNC_SANITIZE=1   build with AddressSanitizer + UndefinedBehaviorSanitizer (see tools/run_sanitized_tests.sh)
  GEASYNC_DEBUG=1      build with -O0 -g
"""

from __future__ import annotations

import os
import pathlib
import re

from cffi import FFI

HERE = pathlib.Path(__file__).resolve().parent
NATIVE = HERE / "_native"
ROOT = HERE.parent


def _rel(path: pathlib.Path) -> str:
    # setuptools wants source paths relative to the project root
    return os.path.relpath(path, ROOT)


def _cdef_from_header(path: pathlib.Path) -> str:
    text = path.read_text()
    match = re.search(r"/\* CDEF BEGIN \*/(.*?)/\* CDEF END \*/", text, re.S)
    if match is None:
        raise RuntimeError(f"{path}: CDEF markers not found")
    return match.group(1)


# Python callbacks that the shim calls on the thread that called into the runtime (allocator bridge).
_CALLBACKS = """
extern "Python" void *_ga_py_alloc_malloc(void *user, size_t size);
extern "Python" void _ga_py_alloc_free(void *user, void *addr);
extern "Python" void _ga_py_alloc_release(void *user);
"""

# Benchmark-only: RunGraphAsync driven natively, no Python in the loop (the limit for the event-loop layer).
_BENCH_CDEF = """
ga_status ga_bench_native_run_graph_async(ga_session *session, uint32_t graph_id, const ga_tensor_desc *inputs,
                                          size_t input_count, uint64_t runs, uint32_t in_flight, uint64_t *elapsed_ns);
"""

# Twin-only entry points: live counters of the twin's own objects.
_TWIN_CDEF = """
typedef struct geasync_twin_counters {
  int64_t ge_sessions;
  int64_t ge_graphs;
  int64_t host_output_blocks;
  int64_t device_output_blocks;
  int64_t device_allocations;
  int64_t streams;
} geasync_twin_counters;
void geasync_twin_live_counters(geasync_twin_counters *out);
"""


def _compile_args() -> tuple[list[str], list[str]]:
    compile_args = ["-std=c++17", "-Wall", "-Wextra", "-Werror", "-fvisibility=hidden", "-pthread"]
    link_args = ["-pthread", "-lstdc++"]
    if os.environ.get("GEASYNC_SANITIZE") == "1":
        san = ["-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-fno-sanitize-recover=undefined"]
        compile_args += ["-O1", "-g"] + san
        link_args += san
    elif os.environ.get("GEASYNC_DEBUG") == "1":
        compile_args += ["-O0", "-g"]
    else:
        compile_args += ["-O2"]
    return compile_args, link_args


def make_twin_builder() -> FFI:
    ffi = FFI()
    ffi.cdef(_cdef_from_header(NATIVE / "include" / "geasync.h") + _CALLBACKS + _BENCH_CDEF + _TWIN_CDEF)
    sources = sorted(
        [*(NATIVE / "shim").glob("*.cc"), *(NATIVE / "twin" / "src").glob("*.cc"), *(NATIVE / "twin" / "onnx").glob("*.cc")]
    )
    compile_args, link_args = _compile_args()
    ffi.set_source(
        "geasync._twin",
        '#include "geasync.h"\n#include "twin/twin_control.h"\n',
        source_extension=".cpp",
        sources=[_rel(p) for p in sources],
        include_dirs=[
            _rel(NATIVE / "include"),
            _rel(NATIVE / "shim"),
            _rel(NATIVE / "twin" / "include"),
            _rel(NATIVE / "twin" / "src"),
            _rel(NATIVE / "twin"),
        ],
        define_macros=[("GEASYNC_BACKEND_NAME", '"twin"')],
        extra_compile_args=compile_args,
        extra_link_args=link_args,
    )
    return ffi


ffibuilder = make_twin_builder()

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
