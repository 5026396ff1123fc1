#!/usr/bin/env bash
# Installs what is missing, then configures (once) and builds mtc into build/: every
# target, or only those named (scripts/build.sh mtc mtrun).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
if [ ! -f build/build.ninja ]; then
  cmake -S . -B build -G Ninja \
    -DMLIR_DIR=/usr/lib/llvm-22/lib/cmake/mlir \
    -DLLVM_EXTERNAL_LIT=/usr/lib/llvm-22/bin/lit
fi
if (($#)); then
  cmake --build build --target "$@"
else
  cmake --build build
fi
