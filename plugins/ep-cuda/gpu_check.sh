#!/usr/bin/env bash
# GPU check for epoxy-ep-cuda: install from the working tree (no network), run the GPU
# tests, then the light models and the BERT encoder against onnxruntime's CPU outputs with
# latency at batch 1 and 8 (and onnxruntime-CUDA when present). Target: < 5 minutes.
#
#   bash plugins/ep-cuda/gpu_check.sh [WHEEL_DIR]     # from anywhere; WHEEL_DIR default: .whl
#
# Expects python3 with CuPy, onnxruntime and torch. Missing pure-Python dependencies (onnx,
# onnx-ir, pluggy, ml_dtypes, hatchling + trove-classifiers to build our packages) are
# installed from WHEEL_DIR when present; if our packages cannot be built there, they are
# used from the source tree with generated entry-point metadata instead.
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
PY=${PYTHON:-python3}
WHL=${1:-.whl}
SITE=/tmp/epoxy-gpu-site
START=$(date +%s)
export PYTHONUNBUFFERED=1
mkdir -p "$SITE"
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"

echo "== machine"; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -2
$PY -c "import cupy, sys; print('python', sys.version.split()[0], 'cupy', cupy.__version__, 'devices', cupy.cuda.runtime.getDeviceCount())"

need=$($PY - <<'PYEOF'
import importlib.util as u
print(" ".join(m for m in ("onnx", "onnx_ir", "pluggy", "ml_dtypes", "hatchling", "pytest") if u.find_spec(m) is None))
PYEOF
)
if [ -n "$need" ]; then
  echo "== missing: $need"
  if [ -d "$WHL" ] && ls "$WHL"/*.whl >/dev/null 2>&1; then
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "$WHL"/*.whl || echo "wheel install failed"
  else
    echo "no wheel folder $WHL"
  fi
fi

echo "== install epoxy from the working tree"
if ! timeout 120 $PY -m pip install -q --no-index --no-deps --no-build-isolation --target "$SITE" ./core ./plugins/ep-cpu ./plugins/ep-cuda; then
  echo "pip build failed: using the source tree with generated entry points"
  export PYTHONPATH="$ROOT/core/src:$ROOT/plugins/ep-cpu/src:$ROOT/plugins/ep-cuda/src:$PYTHONPATH"
  for spec in "epoxy_core:epoxy-core:" "epoxy_ep_cpu:epoxy-ep-cpu:cpu = epoxy_ep_cpu.plugin" "epoxy_ep_cuda:epoxy-ep-cuda:cuda = epoxy_ep_cuda.plugin"; do
    IFS=: read -r mod dist ep <<<"$spec"
    d="$SITE/${mod}-0.1.0.dist-info"; mkdir -p "$d"
    printf 'Metadata-Version: 2.1\nName: %s\nVersion: 0.1.0\n' "$dist" > "$d/METADATA"
    if [ -n "$ep" ]; then printf '[epoxy.providers]\n%s\n' "$ep" > "$d/entry_points.txt"; fi
    if [ "$mod" = epoxy_core ]; then printf '[console_scripts]\nepoxy = epoxy.cli.main:main\n' > "$d/entry_points.txt"; fi
  done
fi
$PY -c "from epoxy.cli.main import main; main(['providers'])"

status=0
echo "== GPU tests"
timeout 150 $PY -m pytest -q -p no:cacheprovider -rs plugins/ep-cuda/tests/ep_cuda || status=1

left=$(( 285 - ($(date +%s) - START) ))
echo "== models (time left ${left}s)"
if [ "$left" -gt 40 ]; then
  timeout "$left" $PY plugins/ep-cuda/gpu_bench.py --budget 0.7 || status=1
else
  echo "skipped: not enough time left"; status=1
fi
echo "== done in $(( $(date +%s) - START ))s, status $status"
exit $status
