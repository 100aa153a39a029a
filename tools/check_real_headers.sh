#!/usr/bin/env bash
# Compiles the shim syntax-only against CANN's real public headers, assembled from clones of hicann/ge,
# hicann/metadef and hicann/runtime by their packaging rules (see tools/check_real_headers.py and docs/ascend.md).
#   tools/check_real_headers.sh --ge <clone> --metadef <clone> --runtime <clone>
#   GEASYNC_GE_REPO=<clone> GEASYNC_METADEF_REPO=<clone> GEASYNC_RUNTIME_REPO=<clone> tools/check_real_headers.sh
# The build script needs cffi and the build requirements: the project's .venv is used when there is one.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
if [ -z "${PYTHON:-}" ] && [ -x .venv/bin/python ]; then python=.venv/bin/python; fi
exec "$python" tools/check_real_headers.py "$@"
