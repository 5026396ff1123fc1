// RUN: mt-opt %s -split-input-file -mt-autodiff | FileCheck %s

// The backward graph of each op. Every case differentiates a loss that reads the op's
// result through mt.cross_entropy; the loss seed is 1.

// CHECK-LABEL: func.func @train_step
// CHECK: %[[X:.*]] = mt.param "x"
// CHECK: %[[Y:.*]] = mt.gelu %[[X]]
// CHECK: %[[L:.*]] = mt.cross_entropy %[[Y]], %[[T:[^ ]*]]
// CHECK: %[[ONE:.*]] = arith.constant {mt.loss_seed} dense<1.000000e+00> : tensor<f32>
// CHECK: %[[DY:.*]] = mt.cross_entropy_grad %[[ONE]], %[[Y]], %[[T]]
// CHECK: %[[DX:.*]] = mt.gelu_grad %[[DY]], %[[X]]
// CHECK: mt.param_grad "x", %[[DX]]
// CHECK: return %[[L]]
func.func @forward(%t: tensor<2x4xi32>) -> tensor<f32> {
  %x = mt.param "x" normal(1.0) : tensor<2x4x8xf32>
  %y = mt.gelu %x : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  %l = mt.cross_entropy %y, %t : (tensor<2x4x8xf32>, tensor<2x4xi32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// GELU's gradient takes its form.
// CHECK-LABEL: func.func @train_step
// CHECK: mt.gelu %{{.*}} {approximate = "none"}
// CHECK: mt.gelu_grad %{{.*}}, %{{.*}} {approximate = "none"}
func.func @forward(%t: tensor<2x4xi32>) -> tensor<f32> {
  %x = mt.param "x" normal(1.0) : tensor<2x4x8xf32>
  %y = mt.gelu %x {approximate = "none"} : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  %l = mt.cross_entropy %y, %t : (tensor<2x4x8xf32>, tensor<2x4xi32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// silu: dx = silu_grad(dy, x); x is the saved activation.
// CHECK-LABEL: func.func @train_step
// CHECK: %[[X:.*]] = mt.param "x"
// CHECK: %[[Y:.*]] = mt.silu %[[X]]
// CHECK: %[[DY:.*]] = mt.cross_entropy_grad
// CHECK: %[[DX:.*]] = mt.silu_grad %[[DY]], %[[X]] : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
// CHECK: mt.param_grad "x", %[[DX]]
func.func @forward(%t: tensor<2x4xi32>) -> tensor<f32> {
  %x = mt.param "x" normal(1.0) : tensor<2x4x8xf32>
  %y = mt.silu %x : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  %l = mt.cross_entropy %y, %t : (tensor<2x4x8xf32>, tensor<2x4xi32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// linear: dx = dy·W, dW = dyᵀ·x, db = Σdy; x is the saved activation.
// CHECK-LABEL: func.func @train_step
// CHECK: %[[X:.*]] = mt.param "x"
// CHECK: %[[W:.*]] = mt.param "w"
// CHECK: mt.param "b"
// CHECK: %[[DY:.*]] = mt.cross_entropy_grad
// CHECK-DAG: %[[DX:.*]] = mt.linear_grad_input %[[DY]], %[[W]] : (tensor<2x4x8xf32>, tensor<8x6xf32>) -> tensor<2x4x6xf32>
// CHECK-DAG: %[[DW:.*]] = mt.linear_grad_weight %[[DY]], %[[X]] : (tensor<2x4x8xf32>, tensor<2x4x6xf32>) -> tensor<8x6xf32>
// CHECK-DAG: %[[DB:.*]] = mt.bias_grad %[[DY]] : (tensor<2x4x8xf32>) -> tensor<8xf32>
// CHECK-DAG: mt.param_grad "b", %[[DB]]
// CHECK-DAG: mt.param_grad "w", %[[DW]]
// CHECK-DAG: mt.param_grad "x", %[[DX]]
func.func @forward(%t: tensor<2x4xi32>) -> tensor<f32> {
  %x = mt.param "x" normal(1.0) : tensor<2x4x6xf32>
  %w = mt.param "w" normal(1.0) : tensor<8x6xf32>
  %b = mt.param "b" zeros : tensor<8xf32>
  %y = mt.linear %x, %w, %b : (tensor<2x4x6xf32>, tensor<8x6xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
  %l = mt.cross_entropy %y, %t : (tensor<2x4x8xf32>, tensor<2x4xi32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// layer_norm: one op yields all three gradients from the saved input.
// CHECK-LABEL: func.func @train_step
// CHECK: %[[X:.*]] = mt.param "x"
// CHECK: %[[G:.*]] = mt.param "g"
// CHECK: %[[DY:.*]] = mt.cross_entropy_grad
// CHECK: %[[DX:.*]], %[[DG:.*]], %[[DB:.*]] = mt.layer_norm_grad %[[DY]], %[[X]], %[[G]] :
// CHECK-DAG: mt.param_grad "b", %[[DB]]
// CHECK-DAG: mt.param_grad "g", %[[DG]]
// CHECK-DAG: mt.param_grad "x", %[[DX]]
func.func @forward(%t: tensor<2x4xi32>) -> tensor<f32> {
  %x = mt.param "x" normal(1.0) : tensor<2x4x8xf32>
  %g = mt.param "g" ones : tensor<8xf32>
  %b = mt.param "b" zeros : tensor<8xf32>
  %y = mt.layer_norm %x, %g, %b : (tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
  %l = mt.cross_entropy %y, %t : (tensor<2x4x8xf32>, tensor<2x4xi32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// add passes the gradient to both sides; a value used twice gets the sum, while a
// parameter receives each contribution as it comes.
// CHECK-LABEL: func.func @train_step
// CHECK: %[[X:.*]] = mt.param "x"
// CHECK: %[[Y:.*]] = mt.gelu %[[X]]
// CHECK: %[[DZ:.*]] = mt.cross_entropy_grad
// CHECK: mt.param_grad "x", %[[DZ]]
// CHECK: %[[SUM:.*]] = mt.add %[[DZ]], %[[DZ]]
// CHECK: %[[DX:.*]] = mt.gelu_grad %[[SUM]], %[[X]]
// CHECK: mt.param_grad "x", %[[DX]]
func.func @forward(%t: tensor<2x4xi32>) -> tensor<f32> {
  %x = mt.param "x" normal(1.0) : tensor<2x4x8xf32>
  %y = mt.gelu %x : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  %z = mt.add %y, %y : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  %w = mt.add %z, %x : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  %l = mt.cross_entropy %w, %t : (tensor<2x4x8xf32>, tensor<2x4xi32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// attention keeps qkv and its own output for backward.
// CHECK-LABEL: func.func @train_step
// CHECK: %[[QKV:.*]] = mt.param "qkv"
// CHECK: %[[O:.*]] = mt.attention %[[QKV]] {causal, heads = 2 : i64}
// CHECK: %[[DO:.*]] = mt.cross_entropy_grad
// CHECK: %[[DQKV:.*]] = mt.attention_grad %[[DO]], %[[QKV]], %[[O]] {causal, heads = 2 : i64} : (tensor<2x4x8xf32>, tensor<2x4x24xf32>, tensor<2x4x8xf32>) -> tensor<2x4x24xf32>
// CHECK: mt.param_grad "qkv", %[[DQKV]]
func.func @forward(%t: tensor<2x4xi32>) -> tensor<f32> {
  %qkv = mt.param "qkv" normal(1.0) : tensor<2x4x24xf32>
  %o = mt.attention %qkv {causal, heads = 2 : i64} : (tensor<2x4x24xf32>) -> tensor<2x4x8xf32>
  %l = mt.cross_entropy %o, %t : (tensor<2x4x8xf32>, tensor<2x4xi32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Grouped-query attention (4 query heads sharing 2 keys and values of 2 dims): its
// gradient reads the QKV with the same groups.
// CHECK-LABEL: func.func @train_step
// CHECK: %[[O:.*]] = mt.attention %[[QKV:[^ ]+]] {causal, heads = 4 : i64, kv_heads = 2 : i64}
// CHECK: mt.attention_grad %{{.*}}, %[[QKV]], %[[O]] {causal, heads = 4 : i64, kv_heads = 2 : i64} : (tensor<2x4x8xf32>, tensor<2x4x16xf32>, tensor<2x4x8xf32>) -> tensor<2x4x16xf32>
func.func @forward(%t: tensor<2x4xi32>) -> tensor<f32> {
  %qkv = mt.param "qkv" normal(1.0) : tensor<2x4x16xf32>
  %o = mt.attention %qkv {causal, heads = 4 : i64, kv_heads = 2 : i64} : (tensor<2x4x16xf32>) -> tensor<2x4x8xf32>
  %l = mt.cross_entropy %o, %t : (tensor<2x4x8xf32>, tensor<2x4xi32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// The unfused chain of multi-query attention (2 query heads, one key and value).
// CHECK-LABEL: func.func @train_step
// CHECK: %[[P:.*]] = mt.attention_probs %[[QKV:[^ ]+]] {causal, heads = 2 : i64, kv_heads = 1 : i64}
// CHECK: mt.attention_context %[[P]], %[[QKV]] {kv_heads = 1 : i64} : (tensor<2x2x4x4xf32>, tensor<2x4x16xf32>) -> tensor<2x4x8xf32>
// CHECK: %[[DP:.*]], %{{.*}} = mt.attention_context_grad %{{.*}}, %[[P]], %[[QKV]] {kv_heads = 1 : i64}
// CHECK: mt.attention_probs_grad %[[DP]], %[[P]], %[[QKV]] {kv_heads = 1 : i64}
func.func @forward(%t: tensor<2x4xi32>) -> tensor<f32> {
  %qkv = mt.param "qkv" normal(1.0) : tensor<2x4x16xf32>
  %p = mt.attention_probs %qkv {causal, heads = 2 : i64, kv_heads = 1 : i64} : (tensor<2x4x16xf32>) -> tensor<2x2x4x4xf32>
  %o = mt.attention_context %p, %qkv {kv_heads = 1 : i64} : (tensor<2x2x4x4xf32>, tensor<2x4x16xf32>) -> tensor<2x4x8xf32>
  %l = mt.cross_entropy %o, %t : (tensor<2x4x8xf32>, tensor<2x4xi32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// A dropout keeps its mask (one byte per element) for its gradient.
// CHECK-LABEL: func.func @train_step
// CHECK: %[[Y:.*]], %[[MASK:.*]] = mt.dropout %{{.*}} {keep_mask, rate = 2.500000e-01 : f64, stream = 7 : i64} : (tensor<2x4x8xf32>) -> (tensor<2x4x8xf32>, tensor<2x4x8xi8>)
// The seed of backward is marked: fp16's loss scale multiplies it, and nothing else.
// CHECK: arith.constant {mt.loss_seed} dense<1.000000e+00> : tensor<f32>
// CHECK: %[[DY:.*]] = mt.cross_entropy_grad
// CHECK: %[[DX:.*]] = mt.dropout_grad %[[DY]], %[[MASK]] {rate = 2.500000e-01 : f64}
// CHECK: mt.param_grad "x", %[[DX]]
func.func @forward(%t: tensor<2x4xi32>) -> tensor<f32> {
  %x = mt.param "x" normal(1.0) : tensor<2x4x8xf32>
  %y = mt.dropout %x {rate = 2.5e-01 : f64, stream = 7 : i64} : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  %l = mt.cross_entropy %y, %t : (tensor<2x4x8xf32>, tensor<2x4xi32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// embedding and position_embedding scatter into their tables; token ids get no
// gradient. The tied table receives two contributions, each accumulated as it comes.
// CHECK-LABEL: func.func @train_step
// CHECK: %[[WTE:.*]] = mt.param "wte"
// CHECK: %[[DLOGITS:.*]] = mt.cross_entropy_grad
// CHECK: %[[DH:.*]] = mt.linear_grad_input %[[DLOGITS]], %[[WTE]]
// CHECK: %[[DOUT:.*]] = mt.linear_grad_weight %[[DLOGITS]]
// CHECK: mt.param_grad "wte", %[[DOUT]]
// CHECK: %[[DPOS:.*]] = mt.position_embedding_grad %[[DH]] {num_positions = 6 : i64} : (tensor<2x4x8xf32>) -> tensor<6x8xf32>
// CHECK: mt.param_grad "wpe", %[[DPOS]]
// CHECK: %[[DIN:.*]] = mt.embedding_grad %[[DH]], %arg0 {num_embeddings = 16 : i64} : (tensor<2x4x8xf32>, tensor<2x4xi32>) -> tensor<16x8xf32>
// CHECK: mt.param_grad "wte", %[[DIN]]
func.func @forward(%tokens: tensor<2x4xi32>, %t: tensor<2x4xi32>) -> tensor<f32> {
  %wte = mt.param "wte" normal(1.0) : tensor<16x8xf32>
  %wpe = mt.param "wpe" normal(1.0) : tensor<6x8xf32>
  %e = mt.embedding %wte, %tokens : (tensor<16x8xf32>, tensor<2x4xi32>) -> tensor<2x4x8xf32>
  %h = mt.position_embedding %e, %wpe : (tensor<2x4x8xf32>, tensor<6x8xf32>) -> tensor<2x4x8xf32>
  %logits = mt.linear %h, %wte : (tensor<2x4x8xf32>, tensor<16x8xf32>) -> tensor<2x4x16xf32>
  %l = mt.cross_entropy %logits, %t : (tensor<2x4x16xf32>, tensor<2x4xi32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// The unfused attention chain: attention_context's gradient gives dprobs and the V
// part of dqkv; the dropout's, through its mask; attention_probs', the Q and K parts
// (each added into the parameter's gradient as it comes).
// CHECK-LABEL: func.func @train_step
// CHECK: %[[P:.*]] = mt.attention_probs %[[QKV:[^ ]+]] {causal, heads = 2 : i64}
// CHECK: %[[PD:.*]], %[[MASK:.*]] = mt.dropout %[[P]] {keep_mask, rate = 1.000000e-01 : f64, stream = 3 : i64}
// CHECK: %[[O:.*]] = mt.attention_context %[[PD]], %[[QKV]]
// CHECK: %[[DO:.*]] = mt.cross_entropy_grad
// CHECK: %[[DPD:.*]], %[[DV:.*]] = mt.attention_context_grad %[[DO]], %[[PD]], %[[QKV]]
// CHECK: mt.param_grad "qkv", %[[DV]]
// CHECK: %[[DP:.*]] = mt.dropout_grad %[[DPD]], %[[MASK]]
// CHECK: %[[DQK:.*]] = mt.attention_probs_grad %[[DP]], %[[P]], %[[QKV]]
// CHECK: mt.param_grad "qkv", %[[DQK]]
func.func @forward(%t: tensor<2x4xi32>) -> tensor<f32> {
  %qkv = mt.param "qkv" normal(1.0) : tensor<2x4x24xf32>
  %p = mt.attention_probs %qkv {causal, heads = 2 : i64} : (tensor<2x4x24xf32>) -> tensor<2x2x4x4xf32>
  %pd = mt.dropout %p {rate = 1.0e-01 : f64, stream = 3 : i64} : (tensor<2x2x4x4xf32>) -> tensor<2x2x4x4xf32>
  %o = mt.attention_context %pd, %qkv : (tensor<2x2x4x4xf32>, tensor<2x4x24xf32>) -> tensor<2x4x8xf32>
  %l = mt.cross_entropy %o, %t : (tensor<2x4x8xf32>, tensor<2x4xi32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// rms_norm: (dx, dw) = rms_norm_grad(dy, x, w); x is the saved activation.
// CHECK-LABEL: func.func @train_step
// CHECK: %[[X:.*]] = mt.param "x"
// CHECK: %[[W:.*]] = mt.param "w"
// CHECK: %[[Y:.*]] = mt.rms_norm %[[X]], %[[W]] {epsilon = 2.500000e-01 : f64}
// CHECK: %[[DY:.*]] = mt.cross_entropy_grad
// CHECK: %[[DX:[^,]*]], %[[DW:.*]] = mt.rms_norm_grad %[[DY]], %[[X]], %[[W]] {epsilon = 2.500000e-01 : f64} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<8xf32>) -> (tensor<2x4x8xf32>, tensor<8xf32>)
// CHECK-DAG: mt.param_grad "x", %[[DX]]
// CHECK-DAG: mt.param_grad "w", %[[DW]]
func.func @forward(%t: tensor<2x4xi32>) -> tensor<f32> {
  %x = mt.param "x" normal(1.0) : tensor<2x4x8xf32>
  %w = mt.param "w" ones : tensor<8xf32>
  %y = mt.rms_norm %x, %w {epsilon = 2.5e-01 : f64} : (tensor<2x4x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
  %l = mt.cross_entropy %y, %t : (tensor<2x4x8xf32>, tensor<2x4xi32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// swiglu: (dgate, dup) = swiglu_grad(dy, gate, up); gate and up are saved.
// CHECK-LABEL: func.func @train_step
// CHECK: %[[A:.*]] = mt.param "gate"
// CHECK: %[[U:.*]] = mt.param "up"
// CHECK: %[[Y:.*]] = mt.swiglu %[[A]], %[[U]]
// CHECK: %[[DY:.*]] = mt.cross_entropy_grad
// CHECK: %[[DA:[^,]*]], %[[DU:.*]] = mt.swiglu_grad %[[DY]], %[[A]], %[[U]] : (tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> (tensor<2x4x8xf32>, tensor<2x4x8xf32>)
// CHECK-DAG: mt.param_grad "gate", %[[DA]]
// CHECK-DAG: mt.param_grad "up", %[[DU]]
func.func @forward(%t: tensor<2x4xi32>) -> tensor<f32> {
  %a = mt.param "gate" normal(1.0) : tensor<2x4x8xf32>
  %u = mt.param "up" normal(1.0) : tensor<2x4x8xf32>
  %y = mt.swiglu %a, %u : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  %l = mt.cross_entropy %y, %t : (tensor<2x4x8xf32>, tensor<2x4xi32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// qk_norm: one gradient op reads dy and the op's input and both weights, and gives the
// input's gradient and each weight's.
// CHECK-LABEL: func.func @train_step
// CHECK: %[[X:.*]] = mt.param "qkv"
// CHECK: %[[WQ:.*]] = mt.param "wq"
// CHECK: %[[WK:.*]] = mt.param "wk"
// CHECK: %[[Y:.*]] = mt.qk_norm %[[X]], %[[WQ]], %[[WK]]
// CHECK: %[[DY:.*]] = mt.cross_entropy_grad
// CHECK: %[[DX:.*]], %[[DWQ:.*]], %[[DWK:.*]] = mt.qk_norm_grad %[[DY]], %[[X]], %[[WQ]], %[[WK]] {epsilon = {{.*}}, heads = 2 : i64, kv_heads = 1 : i64} : (tensor<2x4x16xf32>, tensor<2x4x16xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<2x4x16xf32>, tensor<4xf32>, tensor<4xf32>)
// CHECK-DAG: mt.param_grad "qkv", %[[DX]]
// CHECK-DAG: mt.param_grad "wq", %[[DWQ]]
// CHECK-DAG: mt.param_grad "wk", %[[DWK]]
func.func @forward(%t: tensor<2x4xi32>) -> tensor<f32> {
  %x = mt.param "qkv" normal(1.0) : tensor<2x4x16xf32>
  %wq = mt.param "wq" ones : tensor<4xf32>
  %wk = mt.param "wk" ones : tensor<4xf32>
  %y = mt.qk_norm %x, %wq, %wk {heads = 2 : i64, kv_heads = 1 : i64, epsilon = 1.0e-06 : f64} : (tensor<2x4x16xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<2x4x16xf32>
  %l = mt.cross_entropy %y, %t : (tensor<2x4x16xf32>, tensor<2x4xi32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// rotary: a rotation, so its gradient is the inverse rotation of dy; nothing is saved.
// CHECK-LABEL: func.func @train_step
// CHECK: %[[X:.*]] = mt.param "qkv"
// CHECK: %[[Y:.*]] = mt.rotary %[[X]] {heads = 2 : i64, kv_heads = 1 : i64, theta = 5.000000e+05 : f64}
// CHECK: %[[DY:.*]] = mt.cross_entropy_grad
// CHECK: %[[DX:.*]] = mt.rotary %[[DY]] {heads = 2 : i64, inverse, kv_heads = 1 : i64, theta = 5.000000e+05 : f64} : (tensor<2x4x16xf32>) -> tensor<2x4x16xf32>
// CHECK: mt.param_grad "qkv", %[[DX]]
func.func @forward(%t: tensor<2x4xi32>) -> tensor<f32> {
  %x = mt.param "qkv" normal(1.0) : tensor<2x4x16xf32>
  %y = mt.rotary %x {heads = 2 : i64, kv_heads = 1 : i64, theta = 5.0e+05 : f64} : (tensor<2x4x16xf32>) -> tensor<2x4x16xf32>
  %l = mt.cross_entropy %y, %t : (tensor<2x4x16xf32>, tensor<2x4xi32>) -> tensor<f32>
  return %l : tensor<f32>
}
