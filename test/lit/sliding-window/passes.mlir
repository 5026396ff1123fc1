// RUN: mt-opt %models/mistral-tiny.mlir -mt-expand -mt-specialize="micro-batch-size=2" -mt-autodiff -mt-keep-attention-stats | FileCheck %s
// RUN: mt-opt %models/mistral-tiny.mlir -mt-expand -mt-specialize="micro-batch-size=2" -mt-unfuse-attention -mt-autodiff | FileCheck %s --check-prefix=UNFUSED
// RUN: mt-opt %models/mistral-tiny.mlir -mt-expand -mt-specialize="micro-batch-size=2" -mt-context-parallel="cp=2" -mt-autodiff | FileCheck %s --check-prefix=GATHER
// RUN: mt-opt %models/mistral-tiny.mlir -mt-expand -mt-specialize="micro-batch-size=2" -mt-context-parallel="cp=2 comm-type=p2p" -mt-autodiff | FileCheck %s --check-prefix=RING
// RUN: mt-opt %models/mistral-tiny.mlir -mt-expand -mt-specialize="micro-batch-size=2" -mt-tensor-parallel="tp=2" -mt-autodiff | FileCheck %s --check-prefix=TP
// RUN: mt-opt %models/mistral-tiny.mlir -mt-expand -mt-specialize="micro-batch-size=2 seq-length=6" | FileCheck %s --check-prefix=SPANNED --implicit-check-not=window
// RUN: mt-opt %models/mistral-tiny.mlir -mt-expand -mt-specialize="micro-batch-size=2 seq-length=7" | FileCheck %s --check-prefix=KEPT

// A sliding window goes wherever attention goes: to its gradient, to the forward that
// keeps its statistics for it, to the unfused probabilities, to both forms of context
// parallelism, and to each tensor-parallel rank's heads.
// CHECK: %{{.*}}, %[[STATS:.*]] = mt.attention %{{.*}} {causal, heads = 8 : i64, keep_stats, kv_heads = 4 : i64, mt.layer = 0 : i64, window = 6 : i64}
// CHECK: mt.attention_grad %{{.*}}, %[[STATS]] {causal, heads = 8 : i64, kv_heads = 4 : i64, window = 6 : i64}

// UNFUSED: mt.attention_probs %{{.*}} {causal, heads = 8 : i64, kv_heads = 4 : i64, mt.layer = 0 : i64, window = 6 : i64} : (tensor<2x32x128xf32>) -> tensor<2x8x32x32xf32>
// UNFUSED-NOT: mt.attention %

// GATHER: mt.attention %{{.*}} {causal, context_parallel = 2 : i64, heads = 8 : i64, kv_heads = 4 : i64, mt.layer = 0 : i64, window = 6 : i64}
// GATHER: mt.attention_grad {{.*}} {causal, context_parallel = 2 : i64, heads = 8 : i64, kv_heads = 4 : i64, window = 6 : i64}

// RING: mt.attention %{{.*}} {causal, context_parallel = 2 : i64, heads = 8 : i64, keep_stats, kv_heads = 4 : i64, mt.layer = 0 : i64, ring, window = 6 : i64}
// RING: mt.attention_grad {{.*}} {causal, context_parallel = 2 : i64, heads = 8 : i64, kv_heads = 4 : i64, ring, window = 6 : i64}

// TP: mt.attention %{{.*}} {causal, head_parallel, heads = 4 : i64, kv_heads = 2 : i64, mt.layer = 0 : i64, window = 6 : i64}
// TP: mt.attention_grad {{.*}} {causal, head_parallel, heads = 4 : i64, kv_heads = 2 : i64, window = 6 : i64}

// A window spanning the sequence masks nothing the causal mask does not: mt-specialize
// drops it (and cuDNN may run the attention). One position shorter, it stays.
// SPANNED-COUNT-2: mt.attention %{{.*}} {causal, heads = 8 : i64, kv_heads = 4 : i64, mt.layer = {{[01]}} : i64} : (tensor<2x6x128xf32>)
// KEPT-COUNT-2: mt.attention %{{.*}} {causal, heads = 8 : i64, kv_heads = 4 : i64, mt.layer = {{[01]}} : i64, window = 6 : i64} : (tensor<2x7x128xf32>)
