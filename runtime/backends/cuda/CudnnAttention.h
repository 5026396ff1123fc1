// Fused attention through cuDNN's flash attention (the cuDNN frontend's graph API):
// forward and backward of softmax(scale·q·kᵀ, masked causally, to a sliding window of
// keys, both or neither)·v over our fused qkv, in bf16 or f16 with f32 softmax
// (grouped-query heads' queries packed: SdpaLayout.h). Dropped probabilities take our
// keep mask (cuDNN cannot draw our Philox masks; Attention.cuh writes ours), times
// 1/(1 − rate). The backward is cuDNN's deterministic algorithm: the same bits on every
// run. One graph per shape, built on first use and kept.
#ifndef MT_RUNTIME_BACKENDS_CUDA_CUDNNATTENTION_H
#define MT_RUNTIME_BACKENDS_CUDA_CUDNNATTENTION_H

#include "core/DType.h"
#include "core/SharedMath.h"

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace mt {

struct SdpaProblem {
  QkvLayout layout;
  int64_t b = 0, s = 0;
  plan::DType dtype = plan::DType::BF16; // BF16 or F16
  bool causal = false;
  int64_t window = 0; // 0: none; else query q sees keys from q − window + 1 on
  float scale = 1;
  double rate = 0; // of dropping probabilities
  /// Where rate > 0, the keep mask [b, heads, s, s] in `dtype` (1 kept, 0 dropped), its
  /// rows keepPitch(s) elements apart, which a call reads (not part of the graph's key):
  /// a call asks for it once its graph and workspace are secured, just before cuDNN runs
  /// (so no mask is written for a call that then declines); null, with `why`, where it
  /// cannot be had (the call returns false, launching nothing).
  std::function<const void *(std::string &why)> keep = nullptr;
  /// A whole number of 16 bytes in 16 bits, as cuDNN wants its tensors' strides.
  static int64_t keepPitch(int64_t s) { return paddedColumn(s, 2); }
};

class CudnnAttention {
public:
  /// At least `bytes` of device memory for cuDNN's workspace, valid until the next call;
  /// null where it cannot be allocated (the call then returns false, launching nothing).
  using Workspace = std::function<void *(size_t bytes)>;

  CudnnAttention();
  ~CudnnAttention();
  CudnnAttention(const CudnnAttention &) = delete;
  CudnnAttention &operator=(const CudnnAttention &) = delete;

  /// out [b, s, heads·d] = attention over qkv [b, s, width]; stats [b, heads, s] (f32) the
  /// rows' log-sum-exp of their scaled scores, which the backward takes. False, with
  /// `why`, where cuDNN has no engine for the problem or its workspace does not fit
  /// (nothing is launched); a failure to launch throws.
  bool forward(const SdpaProblem &problem, const void *qkv, void *out, float *stats,
               const Workspace &workspace, cudaStream_t stream, std::string &why);
  /// dqkv = the gradient of attention's qkv, given out, its gradient dout and stats from
  /// forward(); every element of dqkv is written. False, with `why`, as forward().
  bool backward(const SdpaProblem &problem, const void *qkv, const void *out, const void *dout,
                const float *stats, void *dqkv, const Workspace &workspace,
                cudaStream_t stream, std::string &why);

  /// Whether cuDNN has engines for both directions of `problem` (building their graphs
  /// now); false with `why` where not.
  bool supports(const SdpaProblem &problem, std::string &why);

  /// The version of the cuDNN library loaded, as "9.19.0".
  static std::string version();

private:
  struct Graphs;
  std::unique_ptr<Graphs> graphs_;
};

} // namespace mt

#endif // MT_RUNTIME_BACKENDS_CUDA_CUDNNATTENTION_H
