// RUN: mt-opt %s -split-input-file -verify-diagnostics

func.func @param_normal_without_std() {
  // expected-error@+1 {{'mt.param' op parameter 'w': normal init needs a positive std}}
  %0 = mt.param "w" normal : tensor<64x64xf32>
  return
}

// -----

func.func @param_normal_zero_std() {
  // expected-error@+1 {{'mt.param' op parameter 'w': normal init needs a positive std}}
  %0 = mt.param "w" normal(0.0) : tensor<64x64xf32>
  return
}

// -----

func.func @param_normal_negative_std() {
  // expected-error@+1 {{'mt.param' op parameter 'w': normal init needs a positive std}}
  %0 = mt.param "w" normal(-2.0e-02) : tensor<64x64xf32>
  return
}

// -----

func.func @param_ones_with_std() {
  // expected-error@+1 {{'mt.param' op parameter 'ln.weight': ones init takes no std}}
  %0 = mt.param "ln.weight" ones(1.0) : tensor<64xf32>
  return
}

// -----

func.func @param_zeros_with_std() {
  // expected-error@+1 {{'mt.param' op parameter 'ln.bias': zeros init takes no std}}
  %0 = mt.param "ln.bias" zeros(2.0e-02) : tensor<64xf32>
  return
}

// -----

func.func @param_vocab_rows_past_its_rows() {
  // expected-error@+1 {{'mt.param' op parameter 'wte': vocab_rows 65 is not within its 64 rows}}
  %0 = mt.param "wte" normal(2.0e-02) {vocab_rows = 65 : i64} : tensor<64x8xf32>
  return
}

// -----

func.func @param_vocab_rows_of_a_scalar() {
  // expected-error@+1 {{'mt.param' op parameter 'scale': vocab_rows marks a table, not a scalar}}
  %0 = mt.param "scale" ones {vocab_rows = 1 : i64} : tensor<f32>
  return
}

// -----

func.func @param_vocab_rows_of_a_shard() {
  // The global rows bound it, not the shard's.
  // expected-error@+1 {{'mt.param' op parameter 'wte': vocab_rows 0 is not within its 64 rows}}
  %0 = mt.param "wte" normal(2.0e-02) {global_shape = array<i64: 64, 8>, shard_dim = 0 : i64, vocab_rows = 0 : i64} : tensor<32x8xf32>
  return
}

// -----

func.func @param_empty_name() {
  // expected-error@+1 {{'mt.param' op parameter name must not be empty}}
  %0 = mt.param "" zeros : tensor<64xf32>
  return
}

// -----

func.func @param_dynamic_shape() {
  // expected-error@+1 {{'mt.param' op result #0 must be statically shaped tensor of any type values, but got 'tensor<?x64xf32>'}}
  %0 = mt.param "wte" normal(2.0e-02) : tensor<?x64xf32>
  return
}

// -----

func.func @param_grad_dynamic_shape(%g: tensor<?x64xf32>) {
  // expected-error@+1 {{'mt.param_grad' op operand #0 must be statically shaped tensor of any type values, but got 'tensor<?x64xf32>'}}
  mt.param_grad "wte", %g : tensor<?x64xf32>
  return
}

// -----

func.func @repeat_missing_block(%x: tensor<2x16x64xf32>) {
  // expected-error@+1 {{'mt.repeat' op block function @block not found}}
  %0 = mt.repeat 2 @block(%x) {prefix = "h"} : (tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
  return
}

// -----

func.func private @block(%x: tensor<2x16x64xf32>) -> tensor<2x16x32xf32>

func.func @repeat_block_changes_type(%x: tensor<2x16x64xf32>) {
  // expected-error@+1 {{'mt.repeat' op block @block maps 'tensor<2x16x64xf32>' to 'tensor<2x16x32xf32>'; a repeated block must keep its type}}
  %0 = mt.repeat 2 @block(%x) {prefix = "h"} : (tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
  return
}

// -----

func.func private @block(%x: tensor<2x16x64xf32>, %mask: tensor<2x16x64xf32>) -> tensor<2x16x64xf32>

func.func @repeat_block_two_arguments(%x: tensor<2x16x64xf32>) {
  // expected-error@+1 {{'mt.repeat' op block @block must take and return one tensor (the residual stream)}}
  %0 = mt.repeat 2 @block(%x) {prefix = "h"} : (tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
  return
}

// -----

func.func private @block(%x: tensor<?x?x64xf32>) -> tensor<?x?x64xf32>

func.func @repeat_type_differs_from_block(%x: tensor<2x16x64xf32>) {
  // expected-error@+1 {{'mt.repeat' op input 'tensor<2x16x64xf32>' and result 'tensor<2x16x64xf32>' must match block @block of type 'tensor<?x?x64xf32>'}}
  %0 = mt.repeat 2 @block(%x) {prefix = "h"} : (tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
  return
}

// -----

func.func private @block(%x: tensor<2x16x64xf32>) -> tensor<2x16x64xf32>

func.func @repeat_zero_count(%x: tensor<2x16x64xf32>) {
  // expected-error@+1 {{'mt.repeat' op attribute 'count' failed to satisfy constraint: 64-bit signless integer attribute whose value is positive}}
  %0 = mt.repeat 0 @block(%x) {prefix = "h"} : (tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
  return
}

// -----

func.func @embedding_table_rank(%t: tensor<256xf32>, %ids: tensor<2x16xi32>) {
  // expected-error@+2 {{mt.embedding: table must be [V, H], got tensor<256xf32>}}
  // expected-error@+1 {{'mt.embedding' op failed to infer returned types}}
  %0 = mt.embedding %t, %ids : (tensor<256xf32>, tensor<2x16xi32>) -> tensor<2x16x64xf32>
  return
}

// -----

func.func @embedding_float_ids(%t: tensor<256x64xf32>, %ids: tensor<2x16xf32>) {
  // expected-error@+1 {{'mt.embedding' op operand #1 must be ranked tensor of 32-bit signless integer or 64-bit signless integer values, but got 'tensor<2x16xf32>'}}
  %0 = mt.embedding %t, %ids : (tensor<256x64xf32>, tensor<2x16xf32>) -> tensor<2x16x64xf32>
  return
}

// -----

func.func @position_embedding_too_long(%x: tensor<2x64x32xf32>, %t: tensor<32x32xf32>) {
  // expected-error@+2 {{mt.position_embedding: sequence length 64 exceeds the 32 positions of table tensor<32x32xf32>}}
  // expected-error@+1 {{'mt.position_embedding' op failed to infer returned types}}
  %0 = mt.position_embedding %x, %t : (tensor<2x64x32xf32>, tensor<32x32xf32>) -> tensor<2x64x32xf32>
  return
}

// -----

func.func @position_embedding_hidden(%x: tensor<2x16x64xf32>, %t: tensor<32x32xf32>) {
  // expected-error@+2 {{mt.position_embedding: table tensor<32x32xf32> does not match the hidden size of input tensor<2x16x64xf32>}}
  // expected-error@+1 {{'mt.position_embedding' op failed to infer returned types}}
  %0 = mt.position_embedding %x, %t : (tensor<2x16x64xf32>, tensor<32x32xf32>) -> tensor<2x16x64xf32>
  return
}

// -----

func.func @position_embedding_input_rank(%x: tensor<16x64xf32>, %t: tensor<32x64xf32>) {
  // expected-error@+2 {{mt.position_embedding: input must be [B, S, H], got tensor<16x64xf32>}}
  // expected-error@+1 {{'mt.position_embedding' op failed to infer returned types}}
  %0 = mt.position_embedding %x, %t : (tensor<16x64xf32>, tensor<32x64xf32>) -> tensor<16x64xf32>
  return
}

// -----

func.func @position_embedding_table_rank(%x: tensor<2x16x64xf32>, %t: tensor<64xf32>) {
  // expected-error@+2 {{mt.position_embedding: table must be [positions, H], got tensor<64xf32>}}
  // expected-error@+1 {{'mt.position_embedding' op failed to infer returned types}}
  %0 = mt.position_embedding %x, %t : (tensor<2x16x64xf32>, tensor<64xf32>) -> tensor<2x16x64xf32>
  return
}

// -----

func.func @layer_norm_weight_size(%x: tensor<2x16x64xf32>, %w: tensor<32xf32>, %b: tensor<64xf32>) {
  // expected-error@+2 {{mt.layer_norm: weight tensor<32xf32> must be [64] of the element type of input tensor<2x16x64xf32>}}
  // expected-error@+1 {{'mt.layer_norm' op failed to infer returned types}}
  %0 = mt.layer_norm %x, %w, %b : (tensor<2x16x64xf32>, tensor<32xf32>, tensor<64xf32>) -> tensor<2x16x64xf32>
  return
}

// -----

func.func @layer_norm_bias_rank(%x: tensor<2x16x64xf32>, %w: tensor<64xf32>, %b: tensor<1x64xf32>) {
  // expected-error@+2 {{mt.layer_norm: bias tensor<1x64xf32> must be [64] of the element type of input tensor<2x16x64xf32>}}
  // expected-error@+1 {{'mt.layer_norm' op failed to infer returned types}}
  %0 = mt.layer_norm %x, %w, %b : (tensor<2x16x64xf32>, tensor<64xf32>, tensor<1x64xf32>) -> tensor<2x16x64xf32>
  return
}

// -----

func.func @layer_norm_scalar(%x: tensor<f32>, %w: tensor<64xf32>) {
  // expected-error@+2 {{mt.layer_norm: input tensor<f32> must have a feature dimension}}
  // expected-error@+1 {{'mt.layer_norm' op failed to infer returned types}}
  %0 = mt.layer_norm %x, %w, %w : (tensor<f32>, tensor<64xf32>, tensor<64xf32>) -> tensor<f32>
  return
}

// -----

func.func @linear_features(%x: tensor<4x8x512xf32>, %w: tensor<1024x768xf32>) {
  // expected-error@+2 {{mt.linear: input tensor<4x8x512xf32> has 512 features but weight tensor<1024x768xf32> takes 768 (weights are [out, in])}}
  // expected-error@+1 {{'mt.linear' op failed to infer returned types}}
  %0 = mt.linear %x, %w : (tensor<4x8x512xf32>, tensor<1024x768xf32>) -> tensor<4x8x1024xf32>
  return
}

// -----

func.func @linear_transposed_weight(%x: tensor<4x8x768xf32>, %w: tensor<768x1024xf32>) {
  // expected-error@+2 {{mt.linear: input tensor<4x8x768xf32> has 768 features but weight tensor<768x1024xf32> takes 1024 (weights are [out, in])}}
  // expected-error@+1 {{'mt.linear' op failed to infer returned types}}
  %0 = mt.linear %x, %w : (tensor<4x8x768xf32>, tensor<768x1024xf32>) -> tensor<4x8x1024xf32>
  return
}

// -----

func.func @linear_bias_size(%x: tensor<4x8x768xf32>, %w: tensor<1024x768xf32>, %b: tensor<768xf32>) {
  // expected-error@+2 {{mt.linear: bias tensor<768xf32> must be [1024] of the element type of result tensor<4x8x1024xf32>}}
  // expected-error@+1 {{'mt.linear' op failed to infer returned types}}
  %0 = mt.linear %x, %w, %b : (tensor<4x8x768xf32>, tensor<1024x768xf32>, tensor<768xf32>) -> tensor<4x8x1024xf32>
  return
}

// -----

func.func @linear_bias_element_type(%x: tensor<4x8x768xf32>, %w: tensor<1024x768xf32>, %b: tensor<1024xf16>) {
  // expected-error@+2 {{mt.linear: bias tensor<1024xf16> must be [1024] of the element type of result tensor<4x8x1024xf32>}}
  // expected-error@+1 {{'mt.linear' op failed to infer returned types}}
  %0 = mt.linear %x, %w, %b : (tensor<4x8x768xf32>, tensor<1024x768xf32>, tensor<1024xf16>) -> tensor<4x8x1024xf32>
  return
}

// -----

func.func @linear_element_type(%x: tensor<4x8x768xf32>, %w: tensor<1024x768xbf16>) {
  // expected-error@+2 {{mt.linear: input tensor<4x8x768xf32> and weight tensor<1024x768xbf16> differ in element type}}
  // expected-error@+1 {{'mt.linear' op failed to infer returned types}}
  %0 = mt.linear %x, %w : (tensor<4x8x768xf32>, tensor<1024x768xbf16>) -> tensor<4x8x1024xf32>
  return
}

// -----

func.func @linear_weight_rank(%x: tensor<4x8x768xf32>, %w: tensor<1024xf32>) {
  // expected-error@+2 {{mt.linear: weight must be [out, in], got tensor<1024xf32>}}
  // expected-error@+1 {{'mt.linear' op failed to infer returned types}}
  %0 = mt.linear %x, %w : (tensor<4x8x768xf32>, tensor<1024xf32>) -> tensor<4x8x1024xf32>
  return
}

// -----

func.func @linear_scalar_input(%x: tensor<f32>, %w: tensor<1024x768xf32>) {
  // expected-error@+2 {{mt.linear: input tensor<f32> must have a feature dimension}}
  // expected-error@+1 {{'mt.linear' op failed to infer returned types}}
  %0 = mt.linear %x, %w : (tensor<f32>, tensor<1024x768xf32>) -> tensor<1024xf32>
  return
}

// -----

func.func @linear_declared_result(%x: tensor<4x8x768xf32>, %w: tensor<1024x768xf32>) {
  // expected-error@+2 {{'mt.linear' op inferred type(s) 'tensor<4x8x1024xf32>' are incompatible with return type(s) of operation 'tensor<4x8x768xf32>'}}
  // expected-error@+1 {{'mt.linear' op failed to infer returned types}}
  %0 = mt.linear %x, %w : (tensor<4x8x768xf32>, tensor<1024x768xf32>) -> tensor<4x8x768xf32>
  return
}

// -----

func.func @linear_gelu_features(%x: tensor<4x8x512xf32>, %w: tensor<1024x768xf32>) {
  // expected-error@+2 {{mt.linear_gelu: input tensor<4x8x512xf32> has 512 features but weight tensor<1024x768xf32> takes 768 (weights are [out, in])}}
  // expected-error@+1 {{'mt.linear_gelu' op failed to infer returned types}}
  %0, %1 = mt.linear_gelu %x, %w : (tensor<4x8x512xf32>, tensor<1024x768xf32>) -> (tensor<4x8x1024xf32>, tensor<4x8x1024xf32>)
  return
}

// -----

func.func @linear_gelu_declared_results(%x: tensor<4x8x768xf32>, %w: tensor<1024x768xf32>) {
  // expected-error@+2 {{'mt.linear_gelu' op inferred type(s) 'tensor<4x8x1024xf32>', 'tensor<4x8x1024xf32>' are incompatible with return type(s) of operation 'tensor<4x8x1024xf32>', 'tensor<4x8x768xf32>'}}
  // expected-error@+1 {{'mt.linear_gelu' op failed to infer returned types}}
  %0, %1 = mt.linear_gelu %x, %w : (tensor<4x8x768xf32>, tensor<1024x768xf32>) -> (tensor<4x8x1024xf32>, tensor<4x8x768xf32>)
  return
}

// -----

func.func @add_shape(%a: tensor<2x16x64xf32>, %b: tensor<2x16x32xf32>) {
  // expected-error@+2 {{mt.add: lhs tensor<2x16x64xf32> and rhs tensor<2x16x32xf32> must have the same shape and element type}}
  // expected-error@+1 {{'mt.add' op failed to infer returned types}}
  %0 = mt.add %a, %b : (tensor<2x16x64xf32>, tensor<2x16x32xf32>) -> tensor<2x16x64xf32>
  return
}

// -----

func.func @add_rank(%a: tensor<2x16x64xf32>, %b: tensor<64xf32>) {
  // expected-error@+2 {{mt.add: lhs tensor<2x16x64xf32> and rhs tensor<64xf32> must have the same shape and element type}}
  // expected-error@+1 {{'mt.add' op failed to infer returned types}}
  %0 = mt.add %a, %b : (tensor<2x16x64xf32>, tensor<64xf32>) -> tensor<2x16x64xf32>
  return
}

// -----

func.func @add_element_type(%a: tensor<2x16x64xf32>, %b: tensor<2x16x64xbf16>) {
  // expected-error@+2 {{mt.add: lhs tensor<2x16x64xf32> and rhs tensor<2x16x64xbf16> must have the same shape and element type}}
  // expected-error@+1 {{'mt.add' op failed to infer returned types}}
  %0 = mt.add %a, %b : (tensor<2x16x64xf32>, tensor<2x16x64xbf16>) -> tensor<2x16x64xf32>
  return
}

// -----

func.func @gelu_declared_result(%x: tensor<2x16x64xf32>) {
  // expected-error@+2 {{'mt.gelu' op inferred type(s) 'tensor<2x16x64xf32>' are incompatible with return type(s) of operation 'tensor<2x16x32xf32>'}}
  // expected-error@+1 {{'mt.gelu' op failed to infer returned types}}
  %0 = mt.gelu %x : (tensor<2x16x64xf32>) -> tensor<2x16x32xf32>
  return
}

// -----

func.func @gelu_declared_dynamic(%x: tensor<2x16x64xf32>) {
  // expected-error@+2 {{'mt.gelu' op inferred type(s) 'tensor<2x16x64xf32>' are incompatible with return type(s) of operation 'tensor<?x?x64xf32>'}}
  // expected-error@+1 {{'mt.gelu' op failed to infer returned types}}
  %0 = mt.gelu %x : (tensor<2x16x64xf32>) -> tensor<?x?x64xf32>
  return
}

// -----

func.func @gelu_integer(%x: tensor<2x16x64xi32>) {
  // expected-error@+1 {{'mt.gelu' op operand #0 must be ranked tensor of 32-bit float or 64-bit float or bfloat16 type or 16-bit float values, but got 'tensor<2x16x64xi32>'}}
  %0 = mt.gelu %x : (tensor<2x16x64xi32>) -> tensor<2x16x64xi32>
  return
}

// -----

func.func @gelu_unranked(%x: tensor<*xf32>) {
  // expected-error@+1 {{'mt.gelu' op operand #0 must be ranked tensor of 32-bit float or 64-bit float or bfloat16 type or 16-bit float values, but got 'tensor<*xf32>'}}
  %0 = mt.gelu %x : (tensor<*xf32>) -> tensor<*xf32>
  return
}

// -----

func.func @attention_width(%qkv: tensor<2x16x200xf32>) {
  // expected-error@+2 {{mt.attention: qkv tensor<2x16x200xf32> is not 4 query and 4 key and value heads of one head dimension}}
  // expected-error@+1 {{'mt.attention' op failed to infer returned types}}
  %0 = mt.attention %qkv {heads = 4 : i64} : (tensor<2x16x200xf32>) -> tensor<2x16x64xf32>
  return
}

// -----

func.func @attention_width_heads(%qkv: tensor<2x16x192xf32>) {
  // expected-error@+2 {{mt.attention: qkv tensor<2x16x192xf32> is not 5 query and 5 key and value heads of one head dimension}}
  // expected-error@+1 {{'mt.attention' op failed to infer returned types}}
  %0 = mt.attention %qkv {causal, heads = 5 : i64} : (tensor<2x16x192xf32>) -> tensor<2x16x64xf32>
  return
}

// -----

func.func @attention_window_without_causal(%qkv: tensor<2x16x192xf32>) {
  // expected-error@+1 {{'mt.attention' op has a window of 4 but no causal mask (a window keeps a query's last keys)}}
  %0 = mt.attention %qkv {heads = 4 : i64, window = 4 : i64} : (tensor<2x16x192xf32>) -> tensor<2x16x64xf32>
  return
}

// -----

func.func @attention_probs_window_without_causal(%qkv: tensor<2x16x192xf32>) {
  // expected-error@+1 {{'mt.attention_probs' op has a window of 4 but no causal mask}}
  %0 = mt.attention_probs %qkv {heads = 4 : i64, window = 4 : i64} : (tensor<2x16x192xf32>) -> tensor<2x4x16x16xf32>
  return
}

// -----

func.func @attention_grad_window_without_causal(%g: tensor<2x16x64xf32>, %qkv: tensor<2x16x192xf32>, %out: tensor<2x16x64xf32>) {
  // expected-error@+1 {{'mt.attention_grad' op has a window of 4 but no causal mask}}
  %0 = mt.attention_grad %g, %qkv, %out {heads = 4 : i64, window = 4 : i64} : (tensor<2x16x64xf32>, tensor<2x16x192xf32>, tensor<2x16x64xf32>) -> tensor<2x16x192xf32>
  return
}

// -----

func.func @attention_window_zero(%qkv: tensor<2x16x192xf32>) {
  // expected-error@+1 {{'mt.attention' op attribute 'window' failed to satisfy constraint: 64-bit signless integer attribute whose value is positive}}
  %0 = mt.attention %qkv {causal, heads = 4 : i64, window = 0 : i64} : (tensor<2x16x192xf32>) -> tensor<2x16x64xf32>
  return
}

// -----

func.func @attention_rank(%qkv: tensor<16x192xf32>) {
  // expected-error@+2 {{mt.attention: qkv must be [B, S, (heads + 2·kv_heads)·d], got tensor<16x192xf32>}}
  // expected-error@+1 {{'mt.attention' op failed to infer returned types}}
  %0 = mt.attention %qkv {heads = 4 : i64} : (tensor<16x192xf32>) -> tensor<16x64xf32>
  return
}

// -----

func.func @attention_dynamic_width(%qkv: tensor<2x16x?xf32>) {
  // expected-error@+2 {{mt.attention: qkv tensor<2x16x?xf32> needs a static last dimension}}
  // expected-error@+1 {{'mt.attention' op failed to infer returned types}}
  %0 = mt.attention %qkv {heads = 4 : i64} : (tensor<2x16x?xf32>) -> tensor<2x16x?xf32>
  return
}

// -----

func.func @attention_declared_result(%qkv: tensor<2x16x192xf32>) {
  // expected-error@+2 {{'mt.attention' op inferred type(s) 'tensor<2x16x64xf32>' are incompatible with return type(s) of operation 'tensor<2x16x192xf32>'}}
  // expected-error@+1 {{'mt.attention' op failed to infer returned types}}
  %0 = mt.attention %qkv {heads = 4 : i64} : (tensor<2x16x192xf32>) -> tensor<2x16x192xf32>
  return
}

// -----

func.func @attention_zero_heads(%qkv: tensor<2x16x192xf32>) {
  // expected-error@+1 {{'mt.attention' op attribute 'heads' failed to satisfy constraint: 64-bit signless integer attribute whose value is positive}}
  %0 = "mt.attention"(%qkv) <{heads = 0 : i64}> : (tensor<2x16x192xf32>) -> tensor<2x16x64xf32>
  return
}

// -----

func.func @dropout_rate_one(%x: tensor<2x16x64xf32>) {
  // expected-error@+1 {{'mt.dropout' op rate 1.000000e+00 must lie in [0, 1)}}
  %0 = mt.dropout %x {rate = 1.0 : f64} : (tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
  return
}

// -----

func.func @dropout_rate_negative(%x: tensor<2x16x64xf32>) {
  // expected-error@+1 {{'mt.dropout' op rate -1.000000e-01 must lie in [0, 1)}}
  %0 = mt.dropout %x {rate = -0.1 : f64, stream = 2 : i64} : (tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
  return
}

// -----

func.func @dropout_without_rate(%x: tensor<2x16x64xf32>) {
  // expected-error@+1 {{'mt.dropout' op requires attribute 'rate'}}
  %0 = mt.dropout %x : (tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
  return
}

// -----

func.func @cross_entropy_targets(%logits: tensor<2x16x256xf32>, %t: tensor<2x8xi32>) {
  // expected-error@+2 {{mt.cross_entropy: logits tensor<2x16x256xf32> and targets tensor<2x8xi32> must be [..., V] and [...]}}
  // expected-error@+1 {{'mt.cross_entropy' op failed to infer returned types}}
  %0 = mt.cross_entropy %logits, %t : (tensor<2x16x256xf32>, tensor<2x8xi32>) -> tensor<f32>
  return
}

// -----

func.func @cross_entropy_targets_rank(%logits: tensor<2x16x256xf32>, %t: tensor<2x16x256xi32>) {
  // expected-error@+2 {{mt.cross_entropy: logits tensor<2x16x256xf32> and targets tensor<2x16x256xi32> must be [..., V] and [...]}}
  // expected-error@+1 {{'mt.cross_entropy' op failed to infer returned types}}
  %0 = mt.cross_entropy %logits, %t : (tensor<2x16x256xf32>, tensor<2x16x256xi32>) -> tensor<f32>
  return
}

// -----

func.func @cross_entropy_num_classes(%logits: tensor<2x16x256xf32>, %t: tensor<2x16xi32>) {
  // expected-error@+2 {{mt.cross_entropy: num_classes 300 exceeds the 256 logits of tensor<2x16x256xf32>}}
  // expected-error@+1 {{'mt.cross_entropy' op failed to infer returned types}}
  %0 = mt.cross_entropy %logits, %t {num_classes = 300 : i64} : (tensor<2x16x256xf32>, tensor<2x16xi32>) -> tensor<f32>
  return
}

// -----

func.func @cross_entropy_declared_result(%logits: tensor<2x16x256xf32>, %t: tensor<2x16xi32>) {
  // expected-error@+2 {{'mt.cross_entropy' op inferred type(s) 'tensor<f32>' are incompatible with return type(s) of operation 'tensor<2x16xf32>'}}
  // expected-error@+1 {{'mt.cross_entropy' op failed to infer returned types}}
  %0 = mt.cross_entropy %logits, %t : (tensor<2x16x256xf32>, tensor<2x16xi32>) -> tensor<2x16xf32>
  return
}

// -----

func.func @embedding_grad_ids(%g: tensor<2x16x64xf32>, %ids: tensor<2x8xi32>) {
  // expected-error@+2 {{mt.embedding_grad: grad tensor<2x16x64xf32> and ids tensor<2x8xi32> must be [..., H] and [...]}}
  // expected-error@+1 {{'mt.embedding_grad' op failed to infer returned types}}
  %0 = mt.embedding_grad %g, %ids {num_embeddings = 256 : i64} : (tensor<2x16x64xf32>, tensor<2x8xi32>) -> tensor<256x64xf32>
  return
}

// -----

func.func @embedding_grad_declared_result(%g: tensor<2x16x64xf32>, %ids: tensor<2x16xi32>) {
  // expected-error@+2 {{'mt.embedding_grad' op inferred type(s) 'tensor<256x64xf32>' are incompatible with return type(s) of operation 'tensor<128x64xf32>'}}
  // expected-error@+1 {{'mt.embedding_grad' op failed to infer returned types}}
  %0 = mt.embedding_grad %g, %ids {num_embeddings = 256 : i64} : (tensor<2x16x64xf32>, tensor<2x16xi32>) -> tensor<128x64xf32>
  return
}

// -----

func.func @position_embedding_grad_too_long(%g: tensor<2x64x32xf32>) {
  // expected-error@+2 {{mt.position_embedding_grad: sequence length 64 of grad tensor<2x64x32xf32> exceeds num_positions 32}}
  // expected-error@+1 {{'mt.position_embedding_grad' op failed to infer returned types}}
  %0 = mt.position_embedding_grad %g {num_positions = 32 : i64} : (tensor<2x64x32xf32>) -> tensor<32x32xf32>
  return
}

// -----

func.func @position_embedding_grad_rank(%g: tensor<64x32xf32>) {
  // expected-error@+2 {{mt.position_embedding_grad: grad must be [B, S, H], got tensor<64x32xf32>}}
  // expected-error@+1 {{'mt.position_embedding_grad' op failed to infer returned types}}
  %0 = mt.position_embedding_grad %g {num_positions = 64 : i64} : (tensor<64x32xf32>) -> tensor<64x32xf32>
  return
}

// -----

func.func @layer_norm_grad_input(%g: tensor<2x16x64xf32>, %x: tensor<2x16x32xf32>, %w: tensor<64xf32>) {
  // expected-error@+2 {{mt.layer_norm_grad: grad tensor<2x16x64xf32> and input tensor<2x16x32xf32> must have the same shape and element type}}
  // expected-error@+1 {{'mt.layer_norm_grad' op failed to infer returned types}}
  %0:3 = mt.layer_norm_grad %g, %x, %w : (tensor<2x16x64xf32>, tensor<2x16x32xf32>, tensor<64xf32>) -> (tensor<2x16x64xf32>, tensor<64xf32>, tensor<64xf32>)
  return
}

// -----

func.func @layer_norm_grad_weight(%g: tensor<2x16x64xf32>, %x: tensor<2x16x64xf32>, %w: tensor<32xf32>) {
  // expected-error@+2 {{mt.layer_norm_grad: weight tensor<32xf32> must be [64] of the element type of input tensor<2x16x64xf32>}}
  // expected-error@+1 {{'mt.layer_norm_grad' op failed to infer returned types}}
  %0:3 = mt.layer_norm_grad %g, %x, %w : (tensor<2x16x64xf32>, tensor<2x16x64xf32>, tensor<32xf32>) -> (tensor<2x16x64xf32>, tensor<32xf32>, tensor<32xf32>)
  return
}

// -----

func.func @linear_grad_input_gelu_pre(%g: tensor<2x16x768xf32>, %w: tensor<768x1024xf32>, %pre: tensor<2x16x768xf32>) {
  // expected-error@+2 {{mt.linear_grad_input_gelu: dy·W tensor<2x16x1024xf32> and pre tensor<2x16x768xf32> must have the same shape and element type}}
  // expected-error@+1 {{'mt.linear_grad_input_gelu' op failed to infer returned types}}
  %0 = mt.linear_grad_input_gelu %g, %w, %pre : (tensor<2x16x768xf32>, tensor<768x1024xf32>, tensor<2x16x768xf32>) -> tensor<2x16x1024xf32>
  return
}

// -----

func.func @linear_grad_input_gelu_features(%g: tensor<2x16x1024xf32>, %w: tensor<768x1024xf32>, %pre: tensor<2x16x1024xf32>) {
  // expected-error@+2 {{mt.linear_grad_input_gelu: grad tensor<2x16x1024xf32> has 1024 features but weight tensor<768x1024xf32> produces 768}}
  // expected-error@+1 {{'mt.linear_grad_input_gelu' op failed to infer returned types}}
  %0 = mt.linear_grad_input_gelu %g, %w, %pre : (tensor<2x16x1024xf32>, tensor<768x1024xf32>, tensor<2x16x1024xf32>) -> tensor<2x16x1024xf32>
  return
}

// -----

func.func @linear_grad_input_features(%g: tensor<2x16x1024xf32>, %w: tensor<768x1024xf32>) {
  // expected-error@+2 {{mt.linear_grad_input: grad tensor<2x16x1024xf32> has 1024 features but weight tensor<768x1024xf32> produces 768}}
  // expected-error@+1 {{'mt.linear_grad_input' op failed to infer returned types}}
  %0 = mt.linear_grad_input %g, %w : (tensor<2x16x1024xf32>, tensor<768x1024xf32>) -> tensor<2x16x1024xf32>
  return
}

// -----

func.func @linear_grad_input_weight_rank(%g: tensor<2x16x1024xf32>, %w: tensor<1024xf32>) {
  // expected-error@+2 {{mt.linear_grad_input: weight must be [out, in], got tensor<1024xf32>}}
  // expected-error@+1 {{'mt.linear_grad_input' op failed to infer returned types}}
  %0 = mt.linear_grad_input %g, %w : (tensor<2x16x1024xf32>, tensor<1024xf32>) -> tensor<2x16x1024xf32>
  return
}

// -----

func.func @linear_grad_weight_leading(%g: tensor<2x16x1024xf32>, %x: tensor<2x8x768xf32>) {
  // expected-error@+2 {{mt.linear_grad_weight: grad tensor<2x16x1024xf32> and input tensor<2x8x768xf32> must agree in all but the last dimension}}
  // expected-error@+1 {{'mt.linear_grad_weight' op failed to infer returned types}}
  %0 = mt.linear_grad_weight %g, %x : (tensor<2x16x1024xf32>, tensor<2x8x768xf32>) -> tensor<1024x768xf32>
  return
}

// -----

func.func @linear_grad_weight_rank(%g: tensor<2x16x1024xf32>, %x: tensor<32x768xf32>) {
  // expected-error@+2 {{mt.linear_grad_weight: grad tensor<2x16x1024xf32> and input tensor<32x768xf32> must agree in all but the last dimension}}
  // expected-error@+1 {{'mt.linear_grad_weight' op failed to infer returned types}}
  %0 = mt.linear_grad_weight %g, %x : (tensor<2x16x1024xf32>, tensor<32x768xf32>) -> tensor<1024x768xf32>
  return
}

// -----

func.func @bias_grad_scalar(%g: tensor<f32>) {
  // expected-error@+2 {{mt.bias_grad: grad tensor<f32> must have a feature dimension}}
  // expected-error@+1 {{'mt.bias_grad' op failed to infer returned types}}
  %0 = mt.bias_grad %g : (tensor<f32>) -> tensor<1xf32>
  return
}

// -----

func.func @bias_grad_declared_result(%g: tensor<2x16x64xf32>) {
  // expected-error@+2 {{'mt.bias_grad' op inferred type(s) 'tensor<64xf32>' are incompatible with return type(s) of operation 'tensor<16x64xf32>'}}
  // expected-error@+1 {{'mt.bias_grad' op failed to infer returned types}}
  %0 = mt.bias_grad %g : (tensor<2x16x64xf32>) -> tensor<16x64xf32>
  return
}

// -----

func.func @gelu_grad_shape(%g: tensor<2x16x64xf32>, %x: tensor<2x16x32xf32>) {
  // expected-error@+2 {{mt.gelu_grad: grad tensor<2x16x64xf32> and input tensor<2x16x32xf32> must have the same shape and element type}}
  // expected-error@+1 {{'mt.gelu_grad' op failed to infer returned types}}
  %0 = mt.gelu_grad %g, %x : (tensor<2x16x64xf32>, tensor<2x16x32xf32>) -> tensor<2x16x64xf32>
  return
}

// -----

func.func @gelu_grad_element_type(%g: tensor<2x16x64xbf16>, %x: tensor<2x16x64xf32>) {
  // expected-error@+2 {{mt.gelu_grad: grad tensor<2x16x64xbf16> and input tensor<2x16x64xf32> must have the same shape and element type}}
  // expected-error@+1 {{'mt.gelu_grad' op failed to infer returned types}}
  %0 = mt.gelu_grad %g, %x : (tensor<2x16x64xbf16>, tensor<2x16x64xf32>) -> tensor<2x16x64xbf16>
  return
}

// -----

func.func @attention_grad_grad(%g: tensor<2x16x64xf32>, %qkv: tensor<2x16x192xf32>, %out: tensor<2x16x32xf32>) {
  // expected-error@+2 {{mt.attention_grad: grad tensor<2x16x64xf32> and output tensor<2x16x32xf32> must have the same shape and element type}}
  // expected-error@+1 {{'mt.attention_grad' op failed to infer returned types}}
  %0 = mt.attention_grad %g, %qkv, %out {heads = 4 : i64} : (tensor<2x16x64xf32>, tensor<2x16x192xf32>, tensor<2x16x32xf32>) -> tensor<2x16x192xf32>
  return
}

// -----

func.func @attention_grad_output(%g: tensor<2x16x32xf32>, %qkv: tensor<2x16x192xf32>, %out: tensor<2x16x32xf32>) {
  // expected-error@+2 {{mt.attention_grad: output tensor<2x16x32xf32> and attention of qkv tensor<2x16x64xf32> must have the same shape and element type}}
  // expected-error@+1 {{'mt.attention_grad' op failed to infer returned types}}
  %0 = mt.attention_grad %g, %qkv, %out {causal, heads = 4 : i64} : (tensor<2x16x32xf32>, tensor<2x16x192xf32>, tensor<2x16x32xf32>) -> tensor<2x16x192xf32>
  return
}

// -----

func.func @attention_grad_width(%g: tensor<2x16x64xf32>, %qkv: tensor<2x16x200xf32>, %out: tensor<2x16x64xf32>) {
  // expected-error@+2 {{mt.attention_grad: qkv tensor<2x16x200xf32> is not 4 query and 4 key and value heads of one head dimension}}
  // expected-error@+1 {{'mt.attention_grad' op failed to infer returned types}}
  %0 = mt.attention_grad %g, %qkv, %out {heads = 4 : i64} : (tensor<2x16x64xf32>, tensor<2x16x200xf32>, tensor<2x16x64xf32>) -> tensor<2x16x200xf32>
  return
}

// -----

func.func @cross_entropy_grad_loss_grad(%dl: tensor<2xf32>, %logits: tensor<2x16x256xf32>, %t: tensor<2x16xi32>) {
  // expected-error@+2 {{mt.cross_entropy_grad: loss_grad tensor<2xf32> must be a scalar}}
  // expected-error@+1 {{'mt.cross_entropy_grad' op failed to infer returned types}}
  %0 = mt.cross_entropy_grad %dl, %logits, %t : (tensor<2xf32>, tensor<2x16x256xf32>, tensor<2x16xi32>) -> tensor<2x16x256xf32>
  return
}

// -----

func.func @cross_entropy_grad_targets(%dl: tensor<f32>, %logits: tensor<2x16x256xf32>, %t: tensor<2x8xi32>) {
  // expected-error@+2 {{mt.cross_entropy_grad: logits tensor<2x16x256xf32> and targets tensor<2x8xi32> must be [..., V] and [...]}}
  // expected-error@+1 {{'mt.cross_entropy_grad' op failed to infer returned types}}
  %0 = mt.cross_entropy_grad %dl, %logits, %t : (tensor<f32>, tensor<2x16x256xf32>, tensor<2x8xi32>) -> tensor<2x16x256xf32>
  return
}

// -----

func.func @cross_entropy_grad_num_classes(%dl: tensor<f32>, %logits: tensor<2x16x256xf32>, %t: tensor<2x16xi32>) {
  // expected-error@+2 {{mt.cross_entropy_grad: num_classes 300 exceeds the 256 logits of tensor<2x16x256xf32>}}
  // expected-error@+1 {{'mt.cross_entropy_grad' op failed to infer returned types}}
  %0 = mt.cross_entropy_grad %dl, %logits, %t {num_classes = 300 : i64} : (tensor<f32>, tensor<2x16x256xf32>, tensor<2x16xi32>) -> tensor<2x16x256xf32>
  return
}

// -----

func.func @position_embedding_element_type(%x: tensor<2x16x64xf32>, %t: tensor<32x64xf16>) -> tensor<2x16x64xf32> {
  // expected-error@+2 {{mt.position_embedding: input tensor<2x16x64xf32> and table tensor<32x64xf16> differ in element type}}
  // expected-error@+1 {{'mt.position_embedding' op failed to infer returned types}}
  %y = mt.position_embedding %x, %t : (tensor<2x16x64xf32>, tensor<32x64xf16>) -> tensor<2x16x64xf32>
  return %y : tensor<2x16x64xf32>
}

// -----

func.func @linear_grad_input_scalar(%g: tensor<f32>, %w: tensor<1024x768xf32>) -> tensor<768xf32> {
  // expected-error@+2 {{mt.linear_grad_input: grad tensor<f32> must have a feature dimension}}
  // expected-error@+1 {{'mt.linear_grad_input' op failed to infer returned types}}
  %y = mt.linear_grad_input %g, %w : (tensor<f32>, tensor<1024x768xf32>) -> tensor<768xf32>
  return %y : tensor<768xf32>
}

// -----

func.func @linear_grad_input_element_type(%g: tensor<2x16x1024xf32>, %w: tensor<1024x768xf16>) -> tensor<2x16x768xf32> {
  // expected-error@+2 {{mt.linear_grad_input: grad tensor<2x16x1024xf32> and weight tensor<1024x768xf16> differ in element type}}
  // expected-error@+1 {{'mt.linear_grad_input' op failed to infer returned types}}
  %y = mt.linear_grad_input %g, %w : (tensor<2x16x1024xf32>, tensor<1024x768xf16>) -> tensor<2x16x768xf32>
  return %y : tensor<2x16x768xf32>
}

// -----

func.func @linear_grad_weight_element_type(%g: tensor<2x16x1024xf32>, %x: tensor<2x16x768xf16>) -> tensor<1024x768xf32> {
  // expected-error@+2 {{mt.linear_grad_weight: grad tensor<2x16x1024xf32> and input tensor<2x16x768xf16> differ in element type}}
  // expected-error@+1 {{'mt.linear_grad_weight' op failed to infer returned types}}
  %y = mt.linear_grad_weight %g, %x : (tensor<2x16x1024xf32>, tensor<2x16x768xf16>) -> tensor<1024x768xf32>
  return %y : tensor<1024x768xf32>
}

// -----

func.func @cross_entropy_grad_element_type(%lg: tensor<f16>, %l: tensor<2x16x256xf32>, %t: tensor<2x16xi32>) -> tensor<2x16x256xf32> {
  // expected-error@+2 {{mt.cross_entropy_grad: loss_grad tensor<f16> must be in the loss's type for logits tensor<2x16x256xf32>}}
  // expected-error@+1 {{'mt.cross_entropy_grad' op failed to infer returned types}}
  %y = mt.cross_entropy_grad %lg, %l, %t : (tensor<f16>, tensor<2x16x256xf32>, tensor<2x16xi32>) -> tensor<2x16x256xf32>
  return %y : tensor<2x16x256xf32>
}

// -----

func.func @param_grad_empty_name(%g: tensor<4x4xf32>) {
  // expected-error@+1 {{'mt.param_grad' op parameter name must not be empty}}
  mt.param_grad "", %g : tensor<4x4xf32>
  return
}

// -----

func.func @layer_norm_epsilon(%x: tensor<2x16x64xf32>, %w: tensor<64xf32>, %b: tensor<64xf32>) -> tensor<2x16x64xf32> {
  // expected-error@+1 {{'mt.layer_norm' op epsilon -1.000000e+00 must be positive}}
  %y = mt.layer_norm %x, %w, %b {epsilon = -1.0 : f64} : (tensor<2x16x64xf32>, tensor<64xf32>, tensor<64xf32>) -> tensor<2x16x64xf32>
  return %y : tensor<2x16x64xf32>
}

// -----

func.func @layer_norm_grad_epsilon(%g: tensor<2x16x64xf32>, %x: tensor<2x16x64xf32>, %w: tensor<64xf32>) -> tensor<2x16x64xf32> {
  // expected-error@+1 {{'mt.layer_norm_grad' op epsilon 0.000000e+00 must be positive}}
  %dx, %dw, %db = mt.layer_norm_grad %g, %x, %w {epsilon = 0.0 : f64} : (tensor<2x16x64xf32>, tensor<2x16x64xf32>, tensor<64xf32>) -> (tensor<2x16x64xf32>, tensor<64xf32>, tensor<64xf32>)
  return %dx : tensor<2x16x64xf32>
}

// -----

func.func @dropout_negative_stream(%x: tensor<2x16x64xf32>) -> tensor<2x16x64xf32> {
  // expected-error@+1 {{'mt.dropout' op stream -3 must not be negative}}
  %y = mt.dropout %x {rate = 0.0 : f64, stream = -3 : i64} : (tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
  return %y : tensor<2x16x64xf32>
}

// -----

func.func @param_empty_shape() {
  // expected-error@+1 {{'mt.param' op parameter 'w' has an empty shape 'tensor<0x8xf32>'}}
  %w = mt.param "w" ones {global_shape = array<i64: 4, 8>, shard_dim = 0 : i64} : tensor<0x8xf32>
  return
}

// -----

func.func @dropout_grad_without_mask(%g: tensor<2x4xf32>) -> tensor<2x4xf32> {
  // expected-error@+1 {{'mt.dropout_grad' op needs its mask or the stream to draw it from}}
  %y = mt.dropout_grad %g {rate = 1.0e-01 : f64} : (tensor<2x4xf32>) -> tensor<2x4xf32>
  return %y : tensor<2x4xf32>
}

// -----

func.func @dropout_grad_mask_shape(%g: tensor<2x4xf32>, %m: tensor<2x5xi8>) -> tensor<2x4xf32> {
  // expected-error@+2 {{mt.dropout_grad: grad tensor<2x4xf32> and mask tensor<2x5xi8> differ in shape}}
  // expected-error@+1 {{'mt.dropout_grad' op failed to infer returned types}}
  %y = mt.dropout_grad %g, %m {rate = 1.0e-01 : f64} : (tensor<2x4xf32>, tensor<2x5xi8>) -> tensor<2x4xf32>
  return %y : tensor<2x4xf32>
}

// -----

func.func @attention_dropout_rate(%qkv: tensor<2x4x24xf32>) -> tensor<2x4x8xf32> {
  // expected-error@+1 {{'mt.attention' op rate 1.500000e+00 must lie in [0, 1)}}
  %o = mt.attention %qkv {causal, dropout = 1.5 : f64, heads = 2 : i64, stream = 0 : i64} : (tensor<2x4x24xf32>) -> tensor<2x4x8xf32>
  return %o : tensor<2x4x8xf32>
}

// -----

func.func @attention_context_probs(%p: tensor<2x3x4x4xf32>, %qkv: tensor<2x4x24xf32>) -> tensor<2x4x8xf32> {
  // expected-error@+2 {{mt.attention_context: qkv tensor<2x4x24xf32> is not 3 query and 3 key and value heads of one head dimension}}
  // expected-error@+1 {{'mt.attention_context' op failed to infer returned types}}
  %o = mt.attention_context %p, %qkv : (tensor<2x3x4x4xf32>, tensor<2x4x24xf32>) -> tensor<2x4x8xf32>
  return %o : tensor<2x4x8xf32>
}

// -----

func.func @silu_declared_result(%x: tensor<2x16x64xf32>) {
  // expected-error@+2 {{'mt.silu' op inferred type(s) 'tensor<2x16x64xf32>' are incompatible with return type(s) of operation 'tensor<2x16x64xbf16>'}}
  // expected-error@+1 {{'mt.silu' op failed to infer returned types}}
  %0 = mt.silu %x : (tensor<2x16x64xf32>) -> tensor<2x16x64xbf16>
  return
}

// -----

func.func @silu_integer(%x: tensor<2x16x64xi32>) {
  // expected-error@+1 {{'mt.silu' op operand #0 must be ranked tensor of 32-bit float or 64-bit float or bfloat16 type or 16-bit float values, but got 'tensor<2x16x64xi32>'}}
  %0 = mt.silu %x : (tensor<2x16x64xi32>) -> tensor<2x16x64xi32>
  return
}

// -----

func.func @silu_grad_shapes(%g: tensor<2x16x64xf32>, %x: tensor<2x16x32xf32>) {
  // expected-error@+2 {{mt.silu_grad: grad tensor<2x16x64xf32> and input tensor<2x16x32xf32> must have the same shape and element type}}
  // expected-error@+1 {{'mt.silu_grad' op failed to infer returned types}}
  %0 = mt.silu_grad %g, %x : (tensor<2x16x64xf32>, tensor<2x16x32xf32>) -> tensor<2x16x64xf32>
  return
}

// -----

func.func @rms_norm_weight_size(%x: tensor<2x16x64xf32>, %w: tensor<32xf32>) {
  // expected-error@+2 {{mt.rms_norm: weight tensor<32xf32> must be [64] of the element type of input tensor<2x16x64xf32>}}
  // expected-error@+1 {{'mt.rms_norm' op failed to infer returned types}}
  %0 = mt.rms_norm %x, %w : (tensor<2x16x64xf32>, tensor<32xf32>) -> tensor<2x16x64xf32>
  return
}

// -----

func.func @rms_norm_scalar(%x: tensor<f32>, %w: tensor<64xf32>) {
  // expected-error@+2 {{mt.rms_norm: input tensor<f32> must have a feature dimension}}
  // expected-error@+1 {{'mt.rms_norm' op failed to infer returned types}}
  %0 = mt.rms_norm %x, %w : (tensor<f32>, tensor<64xf32>) -> tensor<f32>
  return
}

// -----

func.func @rms_norm_epsilon(%x: tensor<2x16x64xf32>, %w: tensor<64xf32>) -> tensor<2x16x64xf32> {
  // expected-error@+1 {{'mt.rms_norm' op epsilon 0.000000e+00 must be positive}}
  %y = mt.rms_norm %x, %w {epsilon = 0.0 : f64} : (tensor<2x16x64xf32>, tensor<64xf32>) -> tensor<2x16x64xf32>
  return %y : tensor<2x16x64xf32>
}

// -----

func.func @rms_norm_grad_input(%g: tensor<2x16x64xf32>, %x: tensor<2x16x32xf32>, %w: tensor<64xf32>) {
  // expected-error@+2 {{mt.rms_norm_grad: grad tensor<2x16x64xf32> and input tensor<2x16x32xf32> must have the same shape and element type}}
  // expected-error@+1 {{'mt.rms_norm_grad' op failed to infer returned types}}
  %0:2 = mt.rms_norm_grad %g, %x, %w : (tensor<2x16x64xf32>, tensor<2x16x32xf32>, tensor<64xf32>) -> (tensor<2x16x64xf32>, tensor<64xf32>)
  return
}

// -----

func.func @rms_norm_grad_epsilon(%g: tensor<2x16x64xf32>, %x: tensor<2x16x64xf32>, %w: tensor<64xf32>) {
  // expected-error@+1 {{'mt.rms_norm_grad' op epsilon -1.000000e+00 must be positive}}
  %0:2 = mt.rms_norm_grad %g, %x, %w {epsilon = -1.0 : f64} : (tensor<2x16x64xf32>, tensor<2x16x64xf32>, tensor<64xf32>) -> (tensor<2x16x64xf32>, tensor<64xf32>)
  return
}

// -----

func.func @swiglu_shapes(%a: tensor<2x16x64xf32>, %u: tensor<2x16x32xf32>) {
  // expected-error@+2 {{mt.swiglu: gate tensor<2x16x64xf32> and up tensor<2x16x32xf32> must have the same shape and element type}}
  // expected-error@+1 {{'mt.swiglu' op failed to infer returned types}}
  %0 = mt.swiglu %a, %u : (tensor<2x16x64xf32>, tensor<2x16x32xf32>) -> tensor<2x16x64xf32>
  return
}

// -----

func.func @swiglu_types(%a: tensor<2x16x64xf32>, %u: tensor<2x16x64xbf16>) {
  // expected-error@+2 {{mt.swiglu: gate tensor<2x16x64xf32> and up tensor<2x16x64xbf16> must have the same shape and element type}}
  // expected-error@+1 {{'mt.swiglu' op failed to infer returned types}}
  %0 = mt.swiglu %a, %u : (tensor<2x16x64xf32>, tensor<2x16x64xbf16>) -> tensor<2x16x64xf32>
  return
}

// -----

func.func @swiglu_grad_shapes(%g: tensor<2x16x64xf32>, %a: tensor<2x16x64xf32>, %u: tensor<2x16x32xf32>) {
  // expected-error@+2 {{mt.swiglu_grad: gate tensor<2x16x64xf32> and up tensor<2x16x32xf32> must have the same shape and element type}}
  // expected-error@+1 {{'mt.swiglu_grad' op failed to infer returned types}}
  %0:2 = mt.swiglu_grad %g, %a, %u : (tensor<2x16x64xf32>, tensor<2x16x64xf32>, tensor<2x16x32xf32>) -> (tensor<2x16x64xf32>, tensor<2x16x64xf32>)
  return
}

// -----

func.func @rotary_kv_heads(%x: tensor<2x16x40xf32>) {
  // expected-error@+2 {{mt.rotary: kv_heads 3 must divide heads 4}}
  // expected-error@+1 {{'mt.rotary' op failed to infer returned types}}
  %0 = mt.rotary %x {heads = 4 : i64, kv_heads = 3 : i64} : (tensor<2x16x40xf32>) -> tensor<2x16x40xf32>
  return
}

// -----

func.func @rotary_odd_head_dim(%x: tensor<2x16x30xf32>) {
  // expected-error@+2 {{mt.rotary: qkv tensor<2x16x30xf32> has heads of odd dimension 5 (rotary turns pairs of dimensions)}}
  // expected-error@+1 {{'mt.rotary' op failed to infer returned types}}
  %0 = mt.rotary %x {heads = 2 : i64} : (tensor<2x16x30xf32>) -> tensor<2x16x30xf32>
  return
}

// -----

func.func @rotary_theta(%x: tensor<2x16x24xf32>) {
  // expected-error@+1 {{'mt.rotary' op theta 0.000000e+00 must be positive}}
  %0 = mt.rotary %x {heads = 2 : i64, theta = 0.0 : f64} : (tensor<2x16x24xf32>) -> tensor<2x16x24xf32>
  return
}

// -----

func.func @rotary_scaling(%x: tensor<2x16x24xf32>) {
  // expected-error@+1 {{'mt.rotary' op frequency scaling needs scaling_factor > 0, 0 < low_freq_factor < high_freq_factor and original_positions > 0}}
  %0 = mt.rotary %x {heads = 2 : i64, scaling_factor = 8.0 : f64, low_freq_factor = 4.0 : f64, high_freq_factor = 1.0 : f64} : (tensor<2x16x24xf32>) -> tensor<2x16x24xf32>
  return
}

// -----

func.func @rotary_heads_unlike_attention(%x: tensor<2x16x48xf32>) {
  %r = mt.rotary %x {heads = 2 : i64} : (tensor<2x16x48xf32>) -> tensor<2x16x48xf32>
  // expected-error@+1 {{'mt.attention' op reads a qkv that mt.rotary turned as 2 query and 2 key/value heads, but attends with 4 query and 4 key/value heads}}
  %a = mt.attention %r {causal, heads = 4 : i64} : (tensor<2x16x48xf32>) -> tensor<2x16x16xf32>
  return
}

// -----

func.func @rotary_grouped_into_attention(%x: tensor<2x16x32xf32>) {
  %r = mt.rotary %x {heads = 2 : i64, kv_heads = 1 : i64} : (tensor<2x16x32xf32>) -> tensor<2x16x32xf32>
  // expected-error@+1 {{'mt.attention_probs' op reads a qkv that mt.rotary turned as 2 query and 1 key/value heads, but attends with 2 query and 2 key/value heads}}
  %p = mt.attention_probs %r {causal, heads = 2 : i64} : (tensor<2x16x32xf32>) -> tensor<2x2x16x16xf32>
  return
}

// -----

func.func @rotary_original_positions(%x: tensor<2x16x24xf32>) {
  // expected-error@+1 {{'mt.rotary' op attribute 'original_positions' failed to satisfy constraint: 64-bit signless integer attribute whose value is positive}}
  %0 = mt.rotary %x {heads = 2 : i64, original_positions = -8 : i64, scaling_factor = 8.0 : f64} : (tensor<2x16x24xf32>) -> tensor<2x16x24xf32>
  return
}

// -----

func.func @grouped_attention_kv_heads(%x: tensor<2x16x40xf32>) {
  // expected-error@+2 {{mt.attention: kv_heads 3 must divide heads 4}}
  // expected-error@+1 {{failed to infer returned types}}
  %0 = mt.attention %x {heads = 4 : i64, kv_heads = 3 : i64} : (tensor<2x16x40xf32>) -> tensor<2x16x16xf32>
  return
}

// -----

func.func @grouped_context_width(%p: tensor<2x4x16x16xf32>, %qkv: tensor<2x16x50xf32>) {
  // expected-error@+2 {{mt.attention_context: qkv tensor<2x16x50xf32> is not 4 query and 2 key and value heads of one head dimension}}
  // expected-error@+1 {{failed to infer returned types}}
  %0 = mt.attention_context %p, %qkv {kv_heads = 2 : i64} : (tensor<2x4x16x16xf32>, tensor<2x16x50xf32>) -> tensor<2x16x32xf32>
  return
}

// -----

func.func @gelu_unknown_approximation(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  // expected-error@+1 {{'mt.gelu' op attribute 'approximate' failed to satisfy constraint: string attribute "tanh" or "none"}}
  %0 = mt.gelu %x {approximate = "erf"} : (tensor<2x8xf32>) -> tensor<2x8xf32>
  return %0 : tensor<2x8xf32>
}

// -----

func.func @qk_norm_kv_heads(%x: tensor<2x16x40xf32>, %w: tensor<4xf32>) {
  // expected-error@+2 {{mt.qk_norm: kv_heads 3 must divide heads 4}}
  // expected-error@+1 {{'mt.qk_norm' op failed to infer returned types}}
  %0 = mt.qk_norm %x, %w, %w {heads = 4 : i64, kv_heads = 3 : i64} : (tensor<2x16x40xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<2x16x40xf32>
  return
}

// -----

func.func @qk_norm_weight_not_a_head(%x: tensor<2x16x32xf32>, %wq: tensor<4xf32>, %wk: tensor<8xf32>) {
  // expected-error@+2 {{mt.qk_norm: key_weight tensor<8xf32> must be [4], a head of qkv tensor<2x16x32xf32>, of its element type}}
  // expected-error@+1 {{'mt.qk_norm' op failed to infer returned types}}
  %0 = mt.qk_norm %x, %wq, %wk {heads = 4 : i64, kv_heads = 2 : i64} : (tensor<2x16x32xf32>, tensor<4xf32>, tensor<8xf32>) -> tensor<2x16x32xf32>
  return
}

// -----

func.func @qk_norm_weight_type(%x: tensor<2x16x32xf32>, %wq: tensor<4xbf16>, %wk: tensor<4xf32>) {
  // expected-error@+2 {{mt.qk_norm: query_weight tensor<4xbf16> must be [4], a head of qkv tensor<2x16x32xf32>, of its element type}}
  // expected-error@+1 {{'mt.qk_norm' op failed to infer returned types}}
  %0 = mt.qk_norm %x, %wq, %wk {heads = 4 : i64, kv_heads = 2 : i64} : (tensor<2x16x32xf32>, tensor<4xbf16>, tensor<4xf32>) -> tensor<2x16x32xf32>
  return
}

// -----

func.func @qk_norm_epsilon(%x: tensor<2x16x32xf32>, %w: tensor<4xf32>) {
  // expected-error@+1 {{'mt.qk_norm' op epsilon 0.000000e+00 must be positive}}
  %0 = mt.qk_norm %x, %w, %w {heads = 4 : i64, kv_heads = 2 : i64, epsilon = 0.0 : f64} : (tensor<2x16x32xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<2x16x32xf32>
  return
}

// -----

func.func @qk_norm_grad_shapes(%dy: tensor<2x16x24xf32>, %x: tensor<2x16x32xf32>, %w: tensor<4xf32>) {
  // expected-error@+2 {{mt.qk_norm_grad: grad tensor<2x16x24xf32> and qkv tensor<2x16x32xf32> must have the same shape and element type}}
  // expected-error@+1 {{'mt.qk_norm_grad' op failed to infer returned types}}
  %0:3 = mt.qk_norm_grad %dy, %x, %w, %w {heads = 4 : i64, kv_heads = 2 : i64} : (tensor<2x16x24xf32>, tensor<2x16x32xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<2x16x32xf32>, tensor<4xf32>, tensor<4xf32>)
  return
}
