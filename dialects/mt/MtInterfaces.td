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
    InterfaceMethod<"GEMM-class FLOPs (2 per multiply-add).",
      "int64_t", "getGemmFlops", (ins), "", [{ return 0; }]>,
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

#endif
