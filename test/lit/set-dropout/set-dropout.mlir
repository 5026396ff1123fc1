// RUN: mt-opt %s -mt-set-dropout="attention=0 hidden=0.2" | FileCheck %s --check-prefix=ZERO
// RUN: mt-opt %s -mt-set-dropout="attention=0.05 hidden=0" | FileCheck %s --check-prefix=NONE
// RUN: mt-opt %s -mt-set-dropout | FileCheck %s --check-prefix=KEEP

func.func @forward(%qkv: tensor<2x3x24xf32>) -> tensor<2x3x8xf32> {
  %a = mt.attention %qkv {causal, dropout = 1.000000e-01 : f64, heads = 2 : i64} : (tensor<2x3x24xf32>) -> tensor<2x3x8xf32>
  %d = mt.dropout %a {rate = 1.000000e-01 : f64} : (tensor<2x3x8xf32>) -> tensor<2x3x8xf32>
  return %d : tensor<2x3x8xf32>
}

// Attention's dropout removed, the hidden rate set.
// ZERO: %[[A:.*]] = mt.attention %{{.*}} {causal, heads = 2 : i64}
// ZERO: %[[D:.*]] = mt.dropout %[[A]] {rate = 2.000000e-01 : f64}
// ZERO: return %[[D]]

// Attention's rate set, the mt.dropout gone and its uses on its input.
// NONE: %[[A:.*]] = mt.attention %{{.*}} {causal, dropout = 5.000000e-02 : f64, heads = 2 : i64}
// NONE-NOT: mt.dropout
// NONE: return %[[A]]

// No option: the model's rates.
// KEEP: mt.attention %{{.*}} {causal, dropout = 1.000000e-01 : f64, heads = 2 : i64}
// KEEP: mt.dropout %{{.*}} {rate = 1.000000e-01 : f64}
