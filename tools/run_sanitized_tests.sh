#!/usr/bin/env bash
# Builds geasync's native code with AddressSanitizer + UndefinedBehaviorSanitizer (GEASYNC_SANITIZE=1) into its
# own virtual environment and runs the test suite under it. Extra arguments go to pytest.
#   bash tools/run_sanitized_tests.sh                 # whole suite
#   bash tools/run_sanitized_tests.sh tests/test_ops.py -x
#   bash tools/run_sanitized_tests.sh --build-only    # venv + instrumented build only (.ci/run builds it while the
#   bash tools/run_sanitized_tests.sh --no-build ...  # main suite runs, then tests it with --no-build)
set -euo pipefail
step=all
case "${1:-}" in --build-only|--no-build) step=$1; shift ;; esac
cd "$(dirname "$0")/.."
venv=${GEASYNC_ASAN_VENV:-.venv-asan}
build() {
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --upgrade pip
  # The test extra's dependencies alone: `pip install ".[test]"` would also rebuild geasync, without the sanitizers.
  "$venv/bin/python" -c 'import tomllib; p = tomllib.load(open("pyproject.toml", "rb"))["project"]; print(
    "\n".join(p["dependencies"] + p["optional-dependencies"]["test"]))' > "$venv/test-requirements.txt"
  "$venv/bin/pip" install -q -r "$venv/test-requirements.txt"
  # setuptools would take an earlier (uninstrumented) build's objects and extension in build/ as up to date
  rm -rf build
  GEASYNC_SANITIZE=1 "$venv/bin/pip" install -q --force-reinstall --no-deps --no-cache-dir .
  # grep reads all of nm's output (no -q): an early exit would fail the pipeline under pipefail, by SIGPIPE
  if ! nm -D "$("$venv/bin/python" -P -c 'import importlib.util as u; print(u.find_spec("geasync._twin").origin)')" \
      | grep __asan_init >/dev/null; then
    echo "run_sanitized_tests.sh: the installed extension is not built with AddressSanitizer" >&2
    exit 1
  fi
}
[ "$step" = --no-build ] || build
[ "$step" != --build-only ] || exit 0
libasan=$(gcc -print-file-name=libasan.so)
libubsan=$(gcc -print-file-name=libubsan.so)
# Python's allocator makes leak reports noise: leaks are checked by the live counters instead.
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:strict_init_order=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export PYTHONMALLOC=malloc
# the pytest script (not `python -m pytest`) keeps the source tree off sys.path: the installed build is tested
LD_PRELOAD="$libasan $libubsan" "$venv/bin/pytest" -p no:cacheprovider -q "$@"
