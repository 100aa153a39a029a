"""GE fidelity at the GE API level: builds tests/native/ge_fidelity_test.cc against the twin's GE/ACL/parser
headers and sources (as a C++ user of GE would link libge_runner_v2) and runs each of its tests.

Each test shows one behaviour of GE (from its source) that users meet in production (threads, queues,
stopped queues, dropped jobs, the RunGraph try-lock, alignment, repeat operations, deferred removal, compile shapes,
error codes); docs/fidelity.md lists them.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import os
import pathlib
import shutil
import subprocess
import tempfile

import pytest

from conftest import ROOT, TensorProto, add_model, helper, make_model

NATIVE = ROOT / "geasync" / "_native"
CXX = os.environ.get("CXX", "g++").split()  # e.g. "ccache g++"
TEST_SOURCE = ROOT / "tests" / "native" / "ge_fidelity_test.cc"

TESTS = [
    "callback_threads",
    "fifo_next_job_after_callback",
    "compile_queue_blocks_at_2048",
    "model_queue_full_fails_job",
    "dynamic_graph_32_pending_block_the_executor",
    "compile_failure_stops_async_queue",
    "destroy_drops_queued_jobs",
    "finalize_drops_queued_jobs",
    "process_wide_run_graph_try_lock",
    "device_input_alignment_not_checked",
    "failed_implicit_compile_leaves_mode_unset",
    "error_text_follows_work_stream",
    "acl_recent_err_msg_null_when_none",
    "load_twice_and_add_twice",
    "remove_running_graph_is_deferred",
    "compile_shapes_by_run_mode",
    "error_codes",
]


def _blas_flags() -> tuple[list[str], list[str]]:
    import scipy_openblas32

    lib_dir = scipy_openblas32.get_lib_dir()
    return (["-I" + scipy_openblas32.get_include_dir(), "-DGEASYNC_HAVE_OPENBLAS=1"],
            ["-L" + lib_dir, "-l" + scipy_openblas32.get_library(), "-Wl,-rpath," + lib_dir])


@pytest.fixture(scope="module")
def fidelity_binary(tmp_path_factory) -> pathlib.Path:
    if shutil.which("g++") is None:
        pytest.fail("g++ is required to build the GE-level fidelity tests")
    sources = sorted([*(NATIVE / "twin" / "src").glob("*.cc"), *(NATIVE / "twin" / "onnx").glob("*.cc"), TEST_SOURCE])
    blas_compile, blas_link = _blas_flags()
    flags = ["-std=c++17", "-O1", "-Wall", "-Wextra", "-Werror", "-pthread",
             "-I" + str(NATIVE / "twin" / "include"), "-I" + str(NATIVE / "twin" / "src"),
             "-I" + str(NATIVE / "twin"), *blas_compile]
    # Objects are cached by content, so re-running the tests does not rebuild the twin.
    cache = pathlib.Path(tempfile.gettempdir()) / "geasync-ge-fidelity-objects"
    cache.mkdir(exist_ok=True)

    def compile_one(src: pathlib.Path) -> pathlib.Path:
        key = hashlib.sha256(src.read_bytes() + " ".join(flags).encode()
                             + b"".join(h.read_bytes() for h in sorted((NATIVE / "twin").rglob("*.h")))).hexdigest()
        obj = cache / f"{src.stem}-{key[:16]}.o"
        if not obj.exists():
            tmp = obj.with_suffix(".tmp")
            r = subprocess.run([*CXX, *flags, "-c", str(src), "-o", str(tmp)], capture_output=True, text=True)
            if r.returncode != 0:
                raise RuntimeError(f"compiling {src.name} failed:\n{r.stderr[-4000:]}")
            tmp.replace(obj)
        return obj

    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        objects = list(pool.map(compile_one, sources))
    binary = tmp_path_factory.mktemp("ge_fidelity") / "ge_fidelity_test"
    r = subprocess.run(["g++", *map(str, objects), "-o", str(binary), "-pthread", *blas_link],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-4000:]
    return binary


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> tuple[pathlib.Path, pathlib.Path, pathlib.Path]:
    d = tmp_path_factory.mktemp("ge_fidelity_models")
    static = d / "add.onnx"
    static.write_bytes(add_model((1, 4)).SerializeToString())
    dynamic = d / "dyn.onnx"
    dynamic.write_bytes(make_model(
        [helper.make_node("Add", ["a", "b"], ["c"], name="add")],
        [("a", TensorProto.FLOAT, ["N", 4]), ("b", TensorProto.FLOAT, ["N", 4])],
        [("c", TensorProto.FLOAT, ["N", 4])]).SerializeToString())
    bad = d / "bad.onnx"  # parses, but its shapes cannot broadcast: every compile of it fails
    bad.write_bytes(make_model(
        [helper.make_node("Add", ["a", "b"], ["c"], name="add")],
        [("a", TensorProto.FLOAT, [2, 4]), ("b", TensorProto.FLOAT, [3, 4])],
        [("c", TensorProto.FLOAT, [3, 4])]).SerializeToString())
    return static, dynamic, bad


@pytest.mark.timeout(900)  # the first case builds the twin from source (minutes on a loaded 2-core machine)
@pytest.mark.parametrize("name", TESTS)
def test_ge_behaviour(fidelity_binary, models, name):
    r = subprocess.run([str(fidelity_binary), *map(str, models), name], capture_output=True, text=True,
                       timeout=120)
    lines = [line for line in r.stdout.splitlines() if line.endswith(name) or f" {name}:" in line]
    assert lines == [f"PASS {name}"], f"exit {r.returncode}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr[-3000:]}"


# --- the twin's public headers declare only what CANN publishes ----------------------------------------------------

_PUBLIC_USE = """
#include "acl/acl_rt.h"
#include "exe_graph/runtime/runtime_tensor.h"
#include "ge/ge_api_v2.h"
#include "parser/onnx_parser.h"
unsigned long use() { return ge::SUCCESS + ge::FAILED + ge::GRAPH_SUCCESS + ge::GRAPH_PARAM_INVALID
                             + gert::Shape::kMaxDimNum + (aclGetRecentErrMsg() == nullptr); }
"""


def _compile_against_public_headers(source: str, tmp_path: pathlib.Path) -> subprocess.CompletedProcess:
    # The include path the twin build gives the shim (geasync/_cffi_build.py): no twin-private directory on it.
    src = tmp_path / "use.cc"
    src.write_text(source)
    flags = ["-std=c++17", "-Wall", "-Wextra", "-Werror", "-fsyntax-only", "-I" + str(NATIVE / "include"),
             "-I" + str(NATIVE / "shim"), "-I" + str(NATIVE / "twin" / "include")]
    return subprocess.run([*CXX, *flags, str(src)], capture_output=True, text=True)


def test_public_names_compile_against_the_twin_headers(tmp_path):
    r = _compile_against_public_headers(_PUBLIC_USE, tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]


@pytest.mark.parametrize("name", ["ge::PARAM_INVALID", "ge::MEMALLOC_FAILED", "ge::GE_GRAPH_NOT_BUILT",
                                  "ge::UNSUPPORTED", "gert::kMaxDimNum"])
def test_names_cann_does_not_publish_fail_the_build(tmp_path, name):
    r = _compile_against_public_headers(_PUBLIC_USE + f"unsigned long bad() {{ return {name}; }}\n", tmp_path)
    assert r.returncode != 0 and name.split("::")[1] in r.stderr, r.stderr[-3000:]
