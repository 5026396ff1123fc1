#ifndef MT_INTERFACES_TD
#define MT_INTERFACES_TD

include "mlir/IR/OpBase.td"

// What an op costs for one execution on static shapes. Accounting sums these, so
// FLOPs are never a side table. GEMM-class FLOPs (2·m·n·k, and the two batched
// products inside attention) are what the model-FLOPs formula of Narayanan et al.
// (2021) counts; elementwise work is reported apart.
def Mt_CostOpInterface : OpInterface<"CostOpInterface"> {
  let cppNamespace = "::mlir::mt";
  let description = "FLOPs and bytes moved by one execution of the op.";
  let methods = [
    InterfaceMethod<[{The matrix products the op counts: each `batch` products of an
      m x k and a k x n matrix (the two of attention per head, the three of a linear's
      forward and backward), as Megatron's FLOPs formula counts them; their FLOPs are
      getGemmFlops. The estimator costs them by shape, adding the products a kernel
      runs beyond them (attention's backward forms the scores again).}],
      "::llvm::SmallVector<::mlir::mt::GemmShape>", "getGemms", (ins), "",
      [{ return {}; }]>,
    InterfaceMethod<"GEMM-class FLOPs (2 per multiply-add): those of getGemms.",
      "int64_t", "getGemmFlops", (ins), [{
        int64_t flops = 0;
        for (const ::mlir::mt::GemmShape &g : $_op.getGemms())
          flops += g.flops();
        return flops;
      }]>,
    InterfaceMethod<"Elementwise and reduction FLOPs.",
      "int64_t", "getOtherFlops", (ins), "",
      [{ return ::mlir::mt::defaultOtherFlops($_op.getOperation()); }]>,
    InterfaceMethod<"Bytes read plus bytes written, each tensor once.",
      "int64_t", "getBytesMoved", (ins), "",
      [{ return ::mlir::mt::defaultBytesMoved($_op.getOperation()); }]>,
  ];
}

// The vector-Jacobian product of an op: given the gradient of each result (a null
// Value where a result does not reach the loss), build ops that compute the gradient
// of each operand, or a null Value for operands that are not differentiable.
// Rules reference only the forward values they need; those are the activations the
// training step keeps alive until backward.
def Mt_DifferentiableOpInterface : OpInterface<"DifferentiableOpInterface"> {
  let cppNamespace = "::mlir::mt";
  let methods = [
    InterfaceMethod<"Builds the gradients of the operands.",
      "::llvm::FailureOr<::llvm::SmallVector<::mlir::Value>>", "buildGradients",
      (ins "::mlir::OpBuilder &":$builder, "::mlir::ValueRange":$resultGrads)>,
  ];
}

// How mt-tensor-parallel partitions an op, given the layouts of its operands across the
// tensor-parallel group (mlir::mt::TensorParallelRewriter, in TensorParallel.h). An op
// without this interface is partitioned pointwise if it is Mt_Pointwise (its operands
// share one layout, which its results take), as upstream's sharding treats elementwise
// ops, and per token if it is Mt_PerToken; any other op is refused. So an elementwise
// op, or a mixture of experts' op after its router, needs no rule at all.
def Mt_TensorParallelOpInterface : OpInterface<"TensorParallelOpInterface"> {
  let cppNamespace = "::mlir::mt";
  let methods = [
    InterfaceMethod<[{Rewrites the op for the group: shards its parameters, inserts the
      collectives around it, sets its result layouts (TensorParallelRewriter::setResultLayout),
      or replaces it.}],
      "::mlir::LogicalResult", "partition",
      (ins "::mlir::mt::TensorParallelRewriter &":$tp)>,
  ];
}

// An op computed element by element on operands of one shape: tensor parallelism
// partitions it pointwise (TensorParallelRewriter::partitionPointwise). Upstream's
// `Elementwise` trait would also do, but its verifier's message runs first and names
// no operand; ours (type inference) names both.
def Mt_Pointwise : NativeOpTrait<"Pointwise"> {
  let cppNamespace = "::mlir::mt";
}

// An op a column-parallel linear may feed: it computes on a tensor split along its last
// dimension (per element, per head, or per vocabulary shard), so a linear whose result
// it reads splits its output features (Megatron's ColumnParallelLinear), and the
// region ends at the next linear, which is row-parallel.
def Mt_ColumnParallelConsumer : NativeOpTrait<"ColumnParallelConsumer"> {
  let cppNamespace = "::mlir::mt";
}

// A mixture-of-experts op computed token by token: tensor parallelism partitions it per
// token (TensorParallelRewriter::partitionPerToken), in its tokens' layout.
def Mt_PerToken : NativeOpTrait<"PerToken"> {
  let cppNamespace = "::mlir::mt";
}

// An op that may write a result over one of its operands: where nothing reads that
// operand after the op, mt-memory-plan gives the two one buffer. Its kernels (and the
// CPU backend's, run as the unfused ops) read each element of the operand before
// writing the same element of the result, and nothing else of it after.
def Mt_InPlaceOpInterface : OpInterface<"InPlaceOpInterface"> {
  let cppNamespace = "::mlir::mt";
  let methods = [
    InterfaceMethod<"The operand whose buffer `result` may take (null: none).",
      "::mlir::Value", "getOverwritable", (ins "::mlir::OpResult":$result)>,
  ];
}

// An op whose weight gradients may be added straight into the parameters' gradients
// (Megatron's gradient-accumulation fusion). With its `accumulate`, which
// mt-fuse-grad-accumulation sets, its results from getFirstWeightGradient() on are in the
// accumulator type and each is read by one mt.param_grad alone: the op adds into that
// parameter's gradient, the result takes no buffer of its own, and the mt.param_grad is
// no instruction of its own.
def Mt_GradAccumulatingOpInterface : OpInterface<"GradAccumulatingOpInterface"> {
  let cppNamespace = "::mlir::mt";
  let methods = [
    InterfaceMethod<"The first result that is a weight gradient (those after it are too).",
      "unsigned", "getFirstWeightGradient", (ins), "", [{ return 0; }]>,
    InterfaceMethod<"Whether the op adds its weight gradients into the parameters'.",
      "bool", "accumulates", (ins), "", [{ return $_op.getAccumulate(); }]>,
  ];
  let verify = [{ return ::mlir::mt::verifyGradAccumulating($_op); }];
}

// How an op becomes an instruction of a plan (runtime/plan/plan.fbs). By default by
// name: the opcode is the op's name in CamelCase (mt.layer_norm: LayerNorm), the
// operands and results are its buffers in order, and each attribute goes to the
// instruction field of the same name; an attribute with no field is an error, never
// dropped. An op that needs more overrides the method beside its other rules.
def Mt_PlanOpInterface : OpInterface<"PlanOpInterface"> {
  let cppNamespace = "::mlir::mt";
  let methods = [
    InterfaceMethod<"Sets the instruction's opcode and attributes.",
      "::mlir::LogicalResult", "encodeInstruction",
      (ins "::mlir::mt::PlanInstruction &":$inst), "",
      [{ return ::mlir::mt::encodeInstructionByName($_op.getOperation(), inst); }]>,
  ];
}

#endif
