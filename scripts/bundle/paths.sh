# Sourced by the bundle's wrappers with $here set to the bundle: the library path is the
# bundle's lib/, then this machine's CUDA libraries (cuBLAS, cuBLASLt, NCCL, cuDNN, NVRTC), from
# $MTC_CUDA_LIBS (colon-separated), the Python wheels' nvidia/*/lib (as PyTorch installs
# them), or the toolkit's lib64.
cuda_dirs=${MTC_CUDA_LIBS:-}
add_dir() {
  for dir in "$@"; do
    [ -d "$dir" ] && cuda_dirs="${cuda_dirs:+$cuda_dirs:}$dir"
  done
  return 0
}
if command -v python3 >/dev/null 2>&1; then
  add_dir $(python3 -c 'import nvidia, os
for root in nvidia.__path__:
    for name in sorted(os.listdir(root)):
        print(os.path.join(root, name, "lib"))' 2>/dev/null)
fi
# Without a python3 that imports them: the usual places of virtual environments.
add_dir /opt/*/.venv/lib/python3*/site-packages/nvidia/*/lib \
  /usr/local/lib/python3*/dist-packages/nvidia/*/lib \
  "${HOME:-/nonexistent}"/.local/lib/python3*/site-packages/nvidia/*/lib
add_dir /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib
export LD_LIBRARY_PATH="${here:?the bundle folder}/lib${cuda_dirs:+:$cuda_dirs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
