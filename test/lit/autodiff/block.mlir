// RUN: mt-opt %s -mt-expand -mt-autodiff | FileCheck %s

// The backward graph of one transformer block, in order. Saved activations are the
// forward values backward reads: the block input x, ln_1's output, qkv, the attention
// output, the residual r1, ln_2's output, the fc output and gelu's output.
module {
  func.func private @block(%x: tensor<2x4x8xf32>) -> tensor<2x4x8xf32> {
    %ln1_w = mt.param "ln_1.weight" ones : tensor<8xf32>
    %ln1_b = mt.param "ln_1.bias" zeros : tensor<8xf32>
    %h1 = mt.layer_norm %x, %ln1_w, %ln1_b : (tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
    %qkv_w = mt.param "attn.qkv.weight" normal(2.0e-02) : tensor<24x8xf32>
    %qkv = mt.linear %h1, %qkv_w : (tensor<2x4x8xf32>, tensor<24x8xf32>) -> tensor<2x4x24xf32>
    %att = mt.attention %qkv {causal, heads = 2 : i64} : (tensor<2x4x24xf32>) -> tensor<2x4x8xf32>
    %proj_w = mt.param "attn.proj.weight" normal(2.0e-02) : tensor<8x8xf32>
    %proj = mt.linear %att, %proj_w : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32>
    %proj_d = mt.dropout %proj {rate = 1.0e-01 : f64} : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
    %r1 = mt.add %x, %proj_d : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
    %ln2_w = mt.param "ln_2.weight" ones : tensor<8xf32>
    %ln2_b = mt.param "ln_2.bias" zeros : tensor<8xf32>
    %h2 = mt.layer_norm %r1, %ln2_w, %ln2_b : (tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
    %fc_w = mt.param "mlp.fc.weight" normal(2.0e-02) : tensor<32x8xf32>
    %fc = mt.linear %h2, %fc_w : (tensor<2x4x8xf32>, tensor<32x8xf32>) -> tensor<2x4x32xf32>
    %g = mt.gelu %fc : (tensor<2x4x32xf32>) -> tensor<2x4x32xf32>
    %out_w = mt.param "mlp.proj.weight" normal(2.0e-02) : tensor<8x32xf32>
    %out = mt.linear %g, %out_w : (tensor<2x4x32xf32>, tensor<8x32xf32>) -> tensor<2x4x8xf32>
    %out_d = mt.dropout %out {rate = 1.0e-01 : f64} : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
    %r2 = mt.add %r1, %out_d : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
    return %r2 : tensor<2x4x8xf32>
  }
  func.func @forward(%t: tensor<2x4xi32>) -> tensor<f32> {
    %x = mt.param "x" normal(1.0) : tensor<2x4x8xf32>
    %y = mt.repeat 1 @block(%x) {prefix = "h"} : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
    %l = mt.cross_entropy %y, %t : (tensor<2x4x8xf32>, tensor<2x4xi32>) -> tensor<f32>
    return %l : tensor<f32>
  }
}

// CHECK-LABEL: func.func @train_step
// CHECK:      %[[X:.*]] = mt.param "x"
// CHECK:      %[[LN1W:.*]] = mt.param "h.0.ln_1.weight"
// CHECK:      %[[H1:.*]] = mt.layer_norm %[[X]], %[[LN1W]]
// CHECK:      %[[QKVW:.*]] = mt.param "h.0.attn.qkv.weight"
// CHECK:      %[[QKV:.*]] = mt.linear %[[H1]], %[[QKVW]]
// CHECK:      %[[ATT:.*]] = mt.attention %[[QKV]]
// CHECK:      %[[PROJW:.*]] = mt.param "h.0.attn.proj.weight"
// CHECK:      %[[PROJ:.*]] = mt.linear %[[ATT]], %[[PROJW]]
// CHECK:      %[[PROJD:.*]], %[[PROJM:.*]] = mt.dropout %[[PROJ]] {keep_mask, mt.layer = 0 : i64, rate = 1.000000e-01 : f64, stream = 0 : i64}
// CHECK:      %[[R1:.*]] = mt.add %[[X]], %[[PROJD]]
// CHECK:      %[[LN2W:.*]] = mt.param "h.0.ln_2.weight"
// CHECK:      %[[H2:.*]] = mt.layer_norm %[[R1]], %[[LN2W]]
// CHECK:      %[[FCW:.*]] = mt.param "h.0.mlp.fc.weight"
// CHECK:      %[[FC:.*]] = mt.linear %[[H2]], %[[FCW]]
// CHECK:      %[[G:.*]] = mt.gelu %[[FC]]
// CHECK:      %[[OUTW:.*]] = mt.param "h.0.mlp.proj.weight"
// CHECK:      %[[OUT:.*]] = mt.linear %[[G]], %[[OUTW]]
// CHECK:      %{{.*}}, %[[OUTM:.*]] = mt.dropout %[[OUT]] {keep_mask, mt.layer = 0 : i64, rate = 1.000000e-01 : f64, stream = 1 : i64}
// CHECK:      %[[LOSS:.*]] = mt.cross_entropy
// Backward, from the loss down to the block input.
// CHECK:      %[[DY:.*]] = mt.cross_entropy_grad
// CHECK-NEXT: %[[DOUTD:.*]] = mt.dropout_grad %[[DY]], %[[OUTM]] {rate = 1.000000e-01 : f64}
// CHECK-NEXT: %[[DG:.*]] = mt.linear_grad_input %[[DOUTD]], %[[OUTW]]
// CHECK-NEXT: %[[DOUTW:.*]] = mt.linear_grad_weight %[[DOUTD]], %[[G]]
// CHECK-NEXT: mt.param_grad "h.0.mlp.proj.weight", %[[DOUTW]]
// CHECK-NEXT: %[[DFC:.*]] = mt.gelu_grad %[[DG]], %[[FC]]
// CHECK-NEXT: %[[DH2:.*]] = mt.linear_grad_input %[[DFC]], %[[FCW]]
// CHECK-NEXT: %[[DFCW:.*]] = mt.linear_grad_weight %[[DFC]], %[[H2]]
// CHECK-NEXT: mt.param_grad "h.0.mlp.fc.weight", %[[DFCW]]
// CHECK-NEXT: %[[DR1P:.*]], %[[DLN2W:.*]], %[[DLN2B:.*]] = mt.layer_norm_grad %[[DH2]], %[[R1]], %[[LN2W]]
// The residual stream's gradient: the skip path plus the MLP path.
// CHECK-NEXT: %[[DR1:.*]] = mt.add %[[DY]], %[[DR1P]]
// CHECK-NEXT: mt.param_grad "h.0.ln_2.weight", %[[DLN2W]]
// CHECK-NEXT: mt.param_grad "h.0.ln_2.bias", %[[DLN2B]]
// CHECK-NEXT: mt.param_grad "x", %[[DR1]]
// CHECK-NEXT: %[[DPROJD:.*]] = mt.dropout_grad %[[DR1]], %[[PROJM]] {rate = 1.000000e-01 : f64}
// CHECK-NEXT: %[[DATT:.*]] = mt.linear_grad_input %[[DPROJD]], %[[PROJW]]
// CHECK-NEXT: %[[DPROJW:.*]] = mt.linear_grad_weight %[[DPROJD]], %[[ATT]]
// CHECK-NEXT: mt.param_grad "h.0.attn.proj.weight", %[[DPROJW]]
// CHECK-NEXT: %[[DQKV:.*]] = mt.attention_grad %[[DATT]], %[[QKV]], %[[ATT]] {causal, heads = 2 : i64}
// CHECK-NEXT: %[[DH1:.*]] = mt.linear_grad_input %[[DQKV]], %[[QKVW]]
// CHECK-NEXT: %[[DQKVW:.*]] = mt.linear_grad_weight %[[DQKV]], %[[H1]]
// CHECK-NEXT: mt.param_grad "h.0.attn.qkv.weight", %[[DQKVW]]
// CHECK-NEXT: %[[DX:.*]], %[[DLN1W:.*]], %[[DLN1B:.*]] = mt.layer_norm_grad %[[DH1]], %[[X]], %[[LN1W]]
// CHECK-NEXT: mt.param_grad "x", %[[DX]]
// CHECK-NEXT: mt.param_grad "h.0.ln_1.weight", %[[DLN1W]]
// CHECK-NEXT: mt.param_grad "h.0.ln_1.bias", %[[DLN1B]]
// CHECK-NEXT: return %[[LOSS]]
