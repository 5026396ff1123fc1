// RUN: mt-opt %s -split-input-file -mt-keep-attention-stats -verify-diagnostics

// Statistics of another shape than the forward's rows are refused.
func.func @stats_shape(%dy: tensor<2x4x8xf32>, %qkv: tensor<2x4x24xf32>, %o: tensor<2x4x8xf32>, %s: tensor<2x4x2xf32>) {
  // expected-error@+2 {{mt.attention_grad: stats tensor<2x4x2xf32> must be tensor<2x2x4xf32>, the rows' statistics of attention over qkv tensor<2x4x24xf32>}}
  // expected-error@+1 {{'mt.attention_grad' op failed to infer returned types}}
  %d = mt.attention_grad %dy, %qkv, %o, %s {heads = 2 : i64} : (tensor<2x4x8xf32>, tensor<2x4x24xf32>, tensor<2x4x8xf32>, tensor<2x4x2xf32>) -> tensor<2x4x24xf32>
  return
}

// -----

// ... or of another type than the loss's.
func.func @stats_type(%dy: tensor<2x4x8xbf16>, %qkv: tensor<2x4x24xbf16>, %o: tensor<2x4x8xbf16>, %s: tensor<2x2x4xbf16>) {
  // expected-error@+2 {{mt.attention_grad: stats tensor<2x2x4xbf16> must be tensor<2x2x4xf32>, the rows' statistics of attention over qkv tensor<2x4x24xbf16>}}
  // expected-error@+1 {{'mt.attention_grad' op failed to infer returned types}}
  %d = mt.attention_grad %dy, %qkv, %o, %s {heads = 2 : i64} : (tensor<2x4x8xbf16>, tensor<2x4x24xbf16>, tensor<2x4x8xbf16>, tensor<2x2x4xbf16>) -> tensor<2x4x24xbf16>
  return
}

// -----

// A forward keeping its statistics says so in its type.
func.func @declared_stats(%qkv: tensor<2x4x24xf32>) {
  // expected-error@+2 {{'mt.attention' op inferred type(s) 'tensor<2x4x8xf32>', 'tensor<2x2x4xf32>' are incompatible with return type(s) of operation 'tensor<2x4x8xf32>', 'tensor<2x4x2xf32>'}}
  // expected-error@+1 {{'mt.attention' op failed to infer returned types}}
  %o:2 = mt.attention %qkv {heads = 2 : i64, keep_stats} : (tensor<2x4x24xf32>) -> (tensor<2x4x8xf32>, tensor<2x4x2xf32>)
  return
}
