// RUN: mt-opt %s -split-input-file -mt-tensor-parallel="tp=2" -verify-diagnostics

func.func @forward(%tokens: tensor<2x4xi32>) -> tensor<2x4x8xf32> {
  %wte = mt.param "wte" normal(2.0e-02) : tensor<15x8xf32>
  // expected-error@+1 {{mt-tensor-parallel: dimension 0 of parameter 'wte' (15) is not divisible by tp 2; pad the vocabulary (mt-pad-vocab)}}
  %e = mt.embedding %wte, %tokens : (tensor<15x8xf32>, tensor<2x4xi32>) -> tensor<2x4x8xf32>
  return %e : tensor<2x4x8xf32>
}

// -----

func.func @forward(%x: tensor<2x4x8xf32>) -> tensor<2x4x6xf32> {
  %w = mt.param "w" normal(2.0e-02) : tensor<18x8xf32>
  %qkv = mt.linear %x, %w : (tensor<2x4x8xf32>, tensor<18x8xf32>) -> tensor<2x4x18xf32>
  // expected-error@+1 {{mt-tensor-parallel: 3 attention heads are not divisible by tp 2}}
  %a = mt.attention %qkv {causal, heads = 3 : i64} : (tensor<2x4x18xf32>) -> tensor<2x4x6xf32>
  return %a : tensor<2x4x6xf32>
}

// -----

func.func @forward(%x: tensor<2x4x8xf32>) -> tensor<2x4x5xf32> {
  %w = mt.param "w" normal(2.0e-02) : tensor<5x8xf32>
  // expected-error@+1 {{mt-tensor-parallel: dimension 0 of parameter 'w' (5) is not divisible by tp 2}}
  %h = mt.linear %x, %w : (tensor<2x4x8xf32>, tensor<5x8xf32>) -> tensor<2x4x5xf32>
  %g = mt.gelu %h : (tensor<2x4x5xf32>) -> tensor<2x4x5xf32>
  return %g : tensor<2x4x5xf32>
}

// -----

func.func @forward(%x: tensor<2x4x8xf32>) -> tensor<2x4x8xf32> {
  %w = mt.param "w" normal(2.0e-02) : tensor<8x8xf32>
  %g1 = mt.param "g" ones : tensor<8xf32>
  %b1 = mt.param "b" zeros : tensor<8xf32>
  %h = mt.linear %x, %w : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32>
  %g = mt.gelu %h : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  // expected-error@+1 {{mt-tensor-parallel: layer_norm of a split tensor}}
  %n = mt.layer_norm %g, %g1, %b1 : (tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
  return %n : tensor<2x4x8xf32>
}

// -----

func.func @forward(%x: tensor<2x4x8xf32>) -> tensor<2x4x8xf32> {
  %w = mt.param "w" normal(2.0e-02) : tensor<8x8xf32>
  %h = mt.linear %x, %w : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32>
  %g = mt.gelu %h : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  // expected-error@+1 {{mt-tensor-parallel: the two operands are laid out differently across the tensor-parallel group}}
  %s = mt.add %g, %x : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  return %s : tensor<2x4x8xf32>
}

// -----

func.func @forward(%x: tensor<2x4x8xf32>) -> tensor<2x4x32xf32> {
  %w = mt.param "w" normal(2.0e-02) : tensor<32x8xf32>
  %h = mt.linear %x, %w : (tensor<2x4x8xf32>, tensor<32x8xf32>) -> tensor<2x4x32xf32>
  %g = mt.gelu %h : (tensor<2x4x32xf32>) -> tensor<2x4x32xf32>
  // expected-error@+1 {{mt-tensor-parallel: returns a value that is split across the tensor-parallel group}}
  return %g : tensor<2x4x32xf32>
}

// -----

// An op with neither a rule of its own nor Mt_Pointwise is refused.
func.func @no_rule(%x: tensor<2x4x8xf32>) -> tensor<8xf32> {
  // expected-error@+1 {{'mt.bias_grad' op mt-tensor-parallel: no tensor-parallel layout for this op}}
  %g = mt.bias_grad %x : (tensor<2x4x8xf32>) -> tensor<8xf32>
  return %g : tensor<8xf32>
}

// -----

func.func @forward(%x: tensor<2x4x8xf32>) -> tensor<2x4x8xf32> {
  %w = mt.param "w" normal(2.0e-02) : tensor<8x8xf32>
  %g1 = mt.param "g" ones : tensor<8xf32>
  %h = mt.linear %x, %w : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32>
  %s = mt.silu %h : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  // expected-error@+1 {{mt-tensor-parallel: rms_norm of a split tensor}}
  %n = mt.rms_norm %s, %g1 : (tensor<2x4x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
  return %n : tensor<2x4x8xf32>
}

// -----

func.func @forward(%x: tensor<2x4x8xf32>) -> tensor<2x4x16xf32> {
  %w = mt.param "qkv.weight" normal(2.0e-02) : tensor<16x8xf32>
  %qkv = mt.linear %x, %w : (tensor<2x4x8xf32>, tensor<16x8xf32>) -> tensor<2x4x16xf32>
  // expected-error@+1 {{mt-tensor-parallel: 1 key/value heads are not divisible by tp 2 (tensor parallelism splits whole groups of query heads; use a tp that divides 1)}}
  %r = mt.rotary %qkv {heads = 2 : i64, kv_heads = 1 : i64} : (tensor<2x4x16xf32>) -> tensor<2x4x16xf32>
  return %r : tensor<2x4x16xf32>
}

// -----

func.func @forward(%x: tensor<2x4x8xf32>) -> tensor<2x4x16xf32> {
  %w = mt.param "qkv.weight" normal(2.0e-02) : tensor<24x8xf32>
  %qkv = mt.linear %x, %w : (tensor<2x4x8xf32>, tensor<24x8xf32>) -> tensor<2x4x24xf32>
  // expected-error@+1 {{mt-tensor-parallel: 1 key/value heads are not divisible by tp 2 (tensor parallelism splits whole groups of query heads; use a tp that divides 1)}}
  %a = mt.attention %qkv {causal, heads = 4 : i64, kv_heads = 1 : i64} : (tensor<2x4x24xf32>) -> tensor<2x4x16xf32>
  return %a : tensor<2x4x16xf32>
}

// -----

// A mixture of experts is per token: a router over logits a column-parallel linear split
// (it also feeds a GELU) is refused.
func.func @forward(%x: tensor<2x4x8xf32>) -> tensor<2x4x4xf32> {
  %w = mt.param "router" normal(2.0e-02) : tensor<4x8xf32>
  %l = mt.linear %x, %w : (tensor<2x4x8xf32>, tensor<4x8xf32>) -> tensor<2x4x4xf32>
  %a = mt.gelu %l : (tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
  // expected-error@+1 {{'mt.moe_router' op mt-tensor-parallel: a mixture of experts over a tensor split along its features}}
  %g, %e = mt.moe_router %l {topk = 2 : i64} : (tensor<2x4x4xf32>) -> (tensor<2x4x2xf32>, tensor<2x4x2xi32>)
  return %a : tensor<2x4x4xf32>
}

// -----

func.func @qk_norm_groups(%x: tensor<2x4x8xf32>) -> tensor<2x4x16xf32> {
  %w = mt.param "qkv.weight" normal(2.0e-02) : tensor<16x8xf32>
  %wq = mt.param "q_norm.weight" ones : tensor<4xf32>
  %wk = mt.param "k_norm.weight" ones : tensor<4xf32>
  %qkv = mt.linear %x, %w : (tensor<2x4x8xf32>, tensor<16x8xf32>) -> tensor<2x4x16xf32>
  // expected-error@+1 {{mt-tensor-parallel: 1 key/value heads are not divisible by tp 2 (tensor parallelism splits whole groups of query heads; use a tp that divides 1)}}
  %n = mt.qk_norm %qkv, %wq, %wk {heads = 2 : i64, kv_heads = 1 : i64} : (tensor<2x4x16xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<2x4x16xf32>
  return %n : tensor<2x4x16xf32>
}

// -----

func.func @qk_norm_weight_read_elsewhere(%x: tensor<2x4x8xf32>) -> tensor<2x4x32xf32> {
  %w = mt.param "qkv.weight" normal(2.0e-02) : tensor<32x8xf32>
  %wq = mt.param "q_norm.weight" ones : tensor<4xf32>
  %wk = mt.param "k_norm.weight" ones : tensor<4xf32>
  %qkv = mt.linear %x, %w : (tensor<2x4x8xf32>, tensor<32x8xf32>) -> tensor<2x4x32xf32>
  // expected-error@+1 {{mt-tensor-parallel: qk_norm's weights must be parameters only qk_norm reads (each rank sums its own heads' part of their gradient)}}
  %n = mt.qk_norm %qkv, %wq, %wk {heads = 4 : i64, kv_heads = 2 : i64} : (tensor<2x4x32xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<2x4x32xf32>
  %s = mt.add %wq, %wk : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %n : tensor<2x4x32xf32>
}
