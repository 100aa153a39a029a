#!/usr/bin/env bash
# Builds the shim and the twin with ThreadSanitizer together with tests/native/completion_stress_test.cc (completion
# queues, GE's runtime threads, streams and host functions under load, and the intra-op pool) and runs it. Any TSan report fails it.
#   bash tools/tsan_stress.sh [seconds]        # default 20
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-20}
python=${PYTHON:-python3}
build=${GEASYNC_TSAN_BUILD:-build/tsan}
mkdir -p "$build"
blas_inc=$("$python" -c "import scipy_openblas32 as s; print(s.get_include_dir())")
blas_dir=$("$python" -c "import scipy_openblas32 as s; print(s.get_lib_dir())")
blas_lib=$("$python" -c "import scipy_openblas32 as s; print(s.get_library())")
# no -Werror here: warnings are the g++ and clang++ builds' job (-O1 can warn differently); this build looks for races
flags=(-std=c++17 -O1 -g -fsanitize=thread -fno-omit-frame-pointer -Wall -Wextra -pthread
       -Igeasync/_native/include -Igeasync/_native/shim -Igeasync/_native/twin/include -Igeasync/_native/twin/src
       -Igeasync/_native/twin "-I$blas_inc" -DGEASYNC_HAVE_OPENBLAS=1 '-DGEASYNC_BACKEND_NAME="twin"')
objects=()
for src in geasync/_native/shim/*.cc geasync/_native/twin/src/*.cc geasync/_native/twin/onnx/*.cc \
           tests/native/completion_stress_test.cc; do
  obj="$build/$(echo "$src" | tr / _).o"
  src_flags=("${flags[@]}")
  if grep -q "target_clones(" "$src"; then  # (the attribute itself: a comment naming it must not match)
    # their ifunc resolvers run while the program is relocated, before TSan's runtime is up: kernel math only, so
    # they are built uninstrumented (TSan still sees every access of the threading code around them)
    src_flags=()
    for f in "${flags[@]}"; do [ "$f" = -fsanitize=thread ] || src_flags+=("$f"); done
  fi
  if [ ! -f "$obj" ] || [ "$src" -nt "$obj" ]; then
    ${CXX:-g++} "${src_flags[@]}" -c "$src" -o "$obj" &
    while [ "$(jobs -rp | wc -l)" -ge "${JOBS:-2}" ]; do wait -n; done
  fi
  objects+=("$obj")
done
while [ "$(jobs -rp | wc -l)" -gt 0 ]; do wait -n; done  # a failed compile fails the script (set -e)
${CXX:-g++} -fsanitize=thread -pthread "${objects[@]}" -o "$build/completion_stress_test" "-L$blas_dir" "-l$blas_lib" \
  "-Wl,-rpath,$blas_dir"
"$python" - "$build/add.onnx" <<'PY'
import sys
from onnx import TensorProto, helper
g = helper.make_graph([helper.make_node("Add", ["a", "b"], ["c"])], "add",
                      [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 16]) for n in "ab"],
                      [helper.make_tensor_value_info("c", TensorProto.FLOAT, [1, 16])])
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
m.ir_version = 8
open(sys.argv[1], "wb").write(m.SerializeToString())
PY
# big enough for the kernels to split their work over the intra-op pool (GEMM, element-wise and convolution blocks)
"$python" - "$build/big.onnx" <<'PY'
import sys
from onnx import TensorProto, helper
import numpy as np
from onnx import numpy_helper
v = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [256, 256]) for n in ("a", "b", "y")]
# and a Conv over 4 images (the direct kernel's (image, group) chunks, each in its own scratch slot); its weights
# are zeros, so that y stays tanh(a @ b) + a, which the test checks
inits = [numpy_helper.from_array(np.array([4, 16, 32, 32], np.int64), "s4"),
         numpy_helper.from_array(np.array([256, 256], np.int64), "s2"),
         numpy_helper.from_array(np.zeros((16, 16, 3, 3), np.float32), "w")]
g = helper.make_graph([helper.make_node("MatMul", ["a", "b"], ["m"]), helper.make_node("Tanh", ["m"], ["t"]),
                       helper.make_node("Reshape", ["a", "s4"], ["x4"]),
                       helper.make_node("Conv", ["x4", "w"], ["c4"], pads=[1, 1, 1, 1]),
                       helper.make_node("Reshape", ["c4", "s2"], ["c2"]), helper.make_node("Add", ["t", "c2"], ["u"]),
                       helper.make_node("Add", ["u", "a"], ["y"])], "big", v[:2], v[2:], initializer=inits)
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
m.ir_version = 8
open(sys.argv[1], "wb").write(m.SerializeToString())
PY
TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 ${TSAN_OPTIONS:-}" \
  "$build/completion_stress_test" "$build/add.onnx" "$seconds" "$build/big.onnx"
