// RUN: mt-opt %s -split-input-file -verify-diagnostics

func.func @router_topk_past_experts(%l: tensor<2x3x4xf32>) {
  // expected-error@+2 {{mt.moe_router: topk 5 of the experts of tensor<2x3x4xf32>}}
  // expected-error@+1 {{'mt.moe_router' op failed to infer returned types}}
  %g, %e = mt.moe_router %l {topk = 5 : i64} : (tensor<2x3x4xf32>) -> (tensor<2x3x5xf32>, tensor<2x3x5xi32>)
  return
}

// -----

func.func @router_topk_zero(%l: tensor<2x3x4xf32>) {
  // expected-error@+1 {{'mt.moe_router' op attribute 'topk' failed to satisfy constraint: 64-bit signless integer attribute whose value is positive}}
  %g, %e = mt.moe_router %l {topk = 0 : i64} : (tensor<2x3x4xf32>) -> (tensor<2x3x0xf32>, tensor<2x3x0xi32>)
  return
}

// -----

func.func @router_grad_topk(%g: tensor<2x3x2xf32>, %l: tensor<2x3x4xf32>, %e: tensor<2x3x2xi32>) {
  // expected-error@+2 {{mt.moe_router_grad: topk 3 but 2 experts a token}}
  // expected-error@+1 {{'mt.moe_router_grad' op failed to infer returned types}}
  %d = mt.moe_router_grad %g, %l, %e {topk = 3 : i64} : (tensor<2x3x2xf32>, tensor<2x3x4xf32>, tensor<2x3x2xi32>) -> tensor<2x3x4xf32>
  return
}

// -----

func.func @dispatch_other_tokens(%x: tensor<2x3x8xf32>, %e: tensor<2x4x2xi32>) {
  // expected-error@+2 {{mt.moe_dispatch: input tensor<2x3x8xf32> and experts tensor<2x4x2xi32> must be [B, S, ...] and [B, S, k] of the same tokens}}
  // expected-error@+1 {{'mt.moe_dispatch' op failed to infer returned types}}
  %r, %c = mt.moe_dispatch %x, %e {num_experts = 4 : i64} : (tensor<2x3x8xf32>, tensor<2x4x2xi32>) -> (tensor<16x8xf32>, tensor<4xi32>)
  return
}

// -----

func.func @dispatch_more_slots_than_experts(%x: tensor<2x3x8xf32>, %e: tensor<2x3x3xi32>) {
  // expected-error@+2 {{mt.moe_dispatch: 3 experts a token among 2}}
  // expected-error@+1 {{'mt.moe_dispatch' op failed to infer returned types}}
  %r, %c = mt.moe_dispatch %x, %e {num_experts = 2 : i64} : (tensor<2x3x8xf32>, tensor<2x3x3xi32>) -> (tensor<18x8xf32>, tensor<2xi32>)
  return
}

// -----

func.func @dispatch_grad_rows(%d: tensor<10x8xf32>, %e: tensor<2x3x2xi32>) {
  // expected-error@+2 {{mt.moe_dispatch_grad: grad tensor<10x8xf32> must be [B·S·k, features] for experts tensor<2x3x2xi32>}}
  // expected-error@+1 {{'mt.moe_dispatch_grad' op failed to infer returned types}}
  %x = mt.moe_dispatch_grad %d, %e {num_experts = 4 : i64} : (tensor<10x8xf32>, tensor<2x3x2xi32>) -> tensor<2x3x8xf32>
  return
}

// -----

func.func @grouped_weight_of_other_experts(%x: tensor<12x8xf32>, %c: tensor<4xi32>, %w: tensor<3x5x8xf32>) {
  // expected-error@+2 {{mt.grouped_linear: rows tensor<12x8xf32>, counts tensor<4xi32> and weight tensor<3x5x8xf32> must be [N, in], [E] (or [sources, E]) and [E, out, in] of one float type}}
  // expected-error@+1 {{'mt.grouped_linear' op failed to infer returned types}}
  %y = mt.grouped_linear %x, %c, %w : (tensor<12x8xf32>, tensor<4xi32>, tensor<3x5x8xf32>) -> tensor<12x5xf32>
  return
}

// -----

func.func @grouped_grad_input_width(%d: tensor<12x6xf32>, %c: tensor<4xi32>, %w: tensor<4x5x8xf32>) {
  // expected-error@+2 {{mt.grouped_linear_grad_input: rows tensor<12x6xf32>, counts tensor<4xi32> and weight tensor<4x5x8xf32> must be [N, out], [E] (or [sources, E]) and [E, out, in] of one float type}}
  // expected-error@+1 {{'mt.grouped_linear_grad_input' op failed to infer returned types}}
  %x = mt.grouped_linear_grad_input %d, %c, %w : (tensor<12x6xf32>, tensor<4xi32>, tensor<4x5x8xf32>) -> tensor<12x8xf32>
  return
}

// -----

func.func @grouped_grad_weight_dynamic_experts(%d: tensor<12x5xf32>, %x: tensor<12x8xf32>, %c: tensor<?xi32>) {
  // expected-error@+2 {{mt.grouped_linear_grad_weight: grad tensor<12x5xf32>, input tensor<12x8xf32> and counts tensor<?xi32> must be [N, out], [N, in] and [E] (or [sources, E])}}
  // expected-error@+1 {{'mt.grouped_linear_grad_weight' op failed to infer returned types}}
  %w = mt.grouped_linear_grad_weight %d, %x, %c : (tensor<12x5xf32>, tensor<12x8xf32>, tensor<?xi32>) -> tensor<4x5x8xf32>
  return
}

// -----

func.func @combine_gates_of_other_slots(%r: tensor<12x5xf32>, %g: tensor<2x3x1xf32>, %e: tensor<2x3x2xi32>) {
  // expected-error@+2 {{mt.moe_combine: gates tensor<2x3x1xf32> and experts tensor<2x3x2xi32> must have the same shape}}
  // expected-error@+1 {{'mt.moe_combine' op failed to infer returned types}}
  %y = mt.moe_combine %r, %g, %e {num_experts = 4 : i64} : (tensor<12x5xf32>, tensor<2x3x1xf32>, tensor<2x3x2xi32>) -> tensor<2x3x5xf32>
  return
}

// -----

func.func @combine_grad_tokens(%d: tensor<2x3x6xf32>, %r: tensor<12x5xf32>, %g: tensor<2x3x2xf32>, %e: tensor<2x3x2xi32>) {
  // expected-error@+2 {{mt.moe_combine_grad: grad tensor<2x3x6xf32> and tokens tensor<2x3x5xf32> must have the same shape and element type}}
  // expected-error@+1 {{'mt.moe_combine_grad' op failed to infer returned types}}
  %dr, %dg = mt.moe_combine_grad %d, %r, %g, %e {num_experts = 4 : i64} : (tensor<2x3x6xf32>, tensor<12x5xf32>, tensor<2x3x2xf32>, tensor<2x3x2xi32>) -> (tensor<12x5xf32>, tensor<2x3x2xf32>)
  return
}

// -----

func.func @router_negative_coefficient(%l: tensor<2x3x4xf32>) {
  // expected-error@+2 {{mt.moe_router: aux_loss_coeff -1.000000e-02 is not a finite number >= 0}}
  // expected-error@+1 {{'mt.moe_router' op failed to infer returned types}}
  %g, %e = mt.moe_router %l {topk = 2 : i64, aux_loss_coeff = -1.0e-02 : f64} : (tensor<2x3x4xf32>) -> (tensor<2x3x2xf32>, tensor<2x3x2xi32>)
  return
}

// -----

func.func @router_load_not_per_expert(%l: tensor<2x3x4xf32>, %load: tensor<3xi32>) {
  // expected-error@+2 {{mt.moe_router: load tensor<3xi32> must be [4] i32}}
  // expected-error@+1 {{'mt.moe_router' op failed to infer returned types}}
  %g, %e = mt.moe_router %l, %load {topk = 2 : i64} : (tensor<2x3x4xf32>, tensor<3xi32>) -> (tensor<2x3x2xf32>, tensor<2x3x2xi32>)
  return
}

// -----

func.func @router_grad_load_type(%g: tensor<2x3x2xf32>, %l: tensor<2x3x4xf32>, %e: tensor<2x3x2xi32>, %load: tensor<4xi64>) {
  // expected-error@+2 {{mt.moe_router_grad: load tensor<4xi64> must be [4] i32}}
  // expected-error@+1 {{'mt.moe_router_grad' op failed to infer returned types}}
  %d = mt.moe_router_grad %g, %l, %e, %load {topk = 2 : i64} : (tensor<2x3x2xf32>, tensor<2x3x4xf32>, tensor<2x3x2xi32>, tensor<4xi64>) -> tensor<2x3x4xf32>
  return
}

// -----

func.func @count_past_experts(%e: tensor<2x3x2xi32>) {
  // expected-error@+2 {{mt.moe_count: 2 experts a token among 1}}
  // expected-error@+1 {{'mt.moe_count' op failed to infer returned types}}
  %c = mt.moe_count %e {num_experts = 1 : i64} : (tensor<2x3x2xi32>) -> tensor<1xi32>
  return
}

// -----

func.func @capacity_factor_zero(%x: tensor<2x3x8xf32>, %e: tensor<2x3x2xi32>) {
  // expected-error@+2 {{mt.moe_dispatch: capacity_factor 0.000000e+00 is not a finite number > 0}}
  // expected-error@+1 {{'mt.moe_dispatch' op failed to infer returned types}}
  %rows, %counts = mt.moe_dispatch %x, %e {num_experts = 4 : i64, capacity_factor = 0.0 : f64} : (tensor<2x3x8xf32>, tensor<2x3x2xi32>) -> (tensor<12x8xf32>, tensor<4xi32>)
  return
}

// -----

// A combine reads the rows where the dispatch of its experts placed them.
func.func @capacity_factor_unlike(%x: tensor<2x3x8xf32>, %g: tensor<2x3x2xf32>, %e: tensor<2x3x2xi32>) {
  %rows, %counts = mt.moe_dispatch %x, %e {num_experts = 4 : i64, capacity_factor = 1.0 : f64} : (tensor<2x3x8xf32>, tensor<2x3x2xi32>) -> (tensor<12x8xf32>, tensor<4xi32>)
  // expected-error@+1 {{'mt.moe_combine' op its capacity_factor differs from that of the mt.moe_dispatch of the same experts, which placed the rows it reads}}
  %y = mt.moe_combine %rows, %g, %e {num_experts = 4 : i64} : (tensor<12x8xf32>, tensor<2x3x2xf32>, tensor<2x3x2xi32>) -> tensor<2x3x8xf32>
  return
}

// -----

func.func @drop_factor_zero(%g: tensor<2x3x2xf32>, %e: tensor<2x3x2xi32>) {
  // expected-error@+2 {{mt.moe_drop: capacity_factor 0.000000e+00 is not a finite number > 0}}
  // expected-error@+1 {{'mt.moe_drop' op failed to infer returned types}}
  %k = mt.moe_drop %g, %e {num_experts = 4 : i64, capacity_factor = 0.0 : f64} : (tensor<2x3x2xf32>, tensor<2x3x2xi32>) -> tensor<2x3x2xi32>
  return
}

// -----

func.func @drop_gates_of_other_slots(%g: tensor<2x3x1xf32>, %e: tensor<2x3x2xi32>) {
  // expected-error@+2 {{mt.moe_drop: gates tensor<2x3x1xf32> and experts tensor<2x3x2xi32> must have the same shape}}
  // expected-error@+1 {{'mt.moe_drop' op failed to infer returned types}}
  %k = mt.moe_drop %g, %e {num_experts = 4 : i64, capacity_factor = 1.0 : f64} : (tensor<2x3x1xf32>, tensor<2x3x2xi32>) -> tensor<2x3x2xi32>
  return
}

// -----

func.func @drop_without_factor(%g: tensor<2x3x2xf32>, %e: tensor<2x3x2xi32>) {
  // expected-error@+1 {{'mt.moe_drop' op requires attribute 'capacity_factor'}}
  %k = mt.moe_drop %g, %e {num_experts = 4 : i64} : (tensor<2x3x2xf32>, tensor<2x3x2xi32>) -> tensor<2x3x2xi32>
  return
}
