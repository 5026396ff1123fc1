// A device buffer that grows to the largest request and is reused, never shrunk: the
// temporaries of kernels and collectives, allocated once rather than per call.
#ifndef MT_RUNTIME_BACKENDS_CUDA_DEVICEBUFFER_H
#define MT_RUNTIME_BACKENDS_CUDA_DEVICEBUFFER_H

#include <cuda_runtime.h>

#include <cstddef>

namespace mt {

class DeviceBuffer {
public:
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer &) = delete;
  DeviceBuffer &operator=(const DeviceBuffer &) = delete;
  ~DeviceBuffer() { cudaFree(data_); }

  size_t capacity() const { return bytes_; }

  /// At least `bytes` of device memory in `out`; on failure the buffer is empty.
  cudaError_t get(size_t bytes, void *&out) {
    if (bytes > bytes_) {
      const cudaError_t freed = cudaFree(data_);
      data_ = nullptr;
      bytes_ = 0;
      if (freed != cudaSuccess)
        return freed;
      if (cudaError_t code = cudaMalloc(&data_, bytes); code != cudaSuccess)
        return code;
      bytes_ = bytes;
    }
    out = data_;
    return cudaSuccess;
  }

private:
  void *data_ = nullptr;
  size_t bytes_ = 0;
};

} // namespace mt

#endif
