// CUDA's per-thread "last error" is what a launch is checked against (cudaGetLastError
// after each kernel, ours and the libraries'), so nothing else may leave one behind:
// an event query of a busy queue records cudaErrorNotReady there, and a failed call
// its error. These helpers take such errors back once they have been handled.
#ifndef MT_RUNTIME_BACKENDS_CUDA_ERRORS_H
#define MT_RUNTIME_BACKENDS_CUDA_ERRORS_H

#include <cuda_runtime.h>

namespace mt {

/// cudaSuccess once the event is reached, cudaErrorNotReady before (which is not left as
/// the last error), or the error of the queue.
inline cudaError_t queryEvent(cudaEvent_t event) {
  const cudaError_t code = cudaEventQuery(event);
  if (code == cudaErrorNotReady)
    (void)cudaGetLastError();
  return code;
}

/// A failed call's error, reported by the caller: not left for the next launch to
/// report as its own. (Sticky errors, which break the context, stay whatever is done.)
inline cudaError_t handled(cudaError_t code) {
  if (code != cudaSuccess)
    (void)cudaGetLastError();
  return code;
}

} // namespace mt

#endif // MT_RUNTIME_BACKENDS_CUDA_ERRORS_H
