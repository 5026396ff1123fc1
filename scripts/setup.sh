#!/usr/bin/env bash
# Installs the Debian packages mtc needs, and only those that are missing.
# Idempotent: a second run installs nothing.
set -euo pipefail

packages=(
  cmake ninja-build g++ pkg-config
  llvm-22-dev llvm-22-tools libmlir-22-dev mlir-22-tools   # compiler: MLIR 22, lit, FileCheck
  flatbuffers-compiler libflatbuffers-dev zlib1g-dev       # the plan format, its CRC
  libgtest-dev                                             # C++ unit tests
  libopenmpi-dev openmpi-bin                               # CPU communicator, launcher
  libopenblas-dev                                          # CPU GEMMs
  libsleef-dev                                             # CPU vectorised tanh, erf, exp
  libsentencepiece-dev sentencepiece                       # tokenizer for mtdata
  libpcre2-dev                                             # byte-level BPE's patterns
  libutf8proc-dev                                          # its normalizers (NFC...)
  librandom123-dev                                         # counter-based RNG (Philox)
  nlohmann-json3-dev                                       # safetensors headers
  fortunes                                                 # demo corpus
  slurmd slurmctld slurm-client munge                      # srun test: a one-node cluster
  iproute2                                                 # multi-host test: namespaces
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present"
else
  echo "setup: installing ${missing[*]}"
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# NumPy, for the independent reference implementation the tests compare mtrun with
# (test/e2e/reference.py), in the python3 the tests run: from PyPI, or Debian's package
# where pip may not install into that interpreter.
if ! python3 -c 'import numpy' 2>/dev/null; then
  echo "setup: installing NumPy"
  python3 -m pip install --quiet numpy 2>/dev/null ||
    { $sudo apt-get update -qq && $sudo apt-get install -y -qq --no-install-recommends python3-numpy; }
fi

# The cuDNN frontend's headers, for the CUDA backend's flash attention, where the CUDA
# toolkit is (CMake builds the CUDA backend only then). Pinned: the graph API it builds
# on changes between releases.
if [ -x /usr/local/cuda/bin/nvcc ] || command -v nvcc >/dev/null 2>&1; then
  frontend=nvidia-cudnn-frontend==1.32.0
  if ! python3 -m pip show nvidia-cudnn-frontend 2>/dev/null | grep -q '^Version: 1.32.0$'; then
    echo "setup: installing $frontend (headers)"
    python3 -m pip install --quiet --no-deps "$frontend"
  fi
fi
