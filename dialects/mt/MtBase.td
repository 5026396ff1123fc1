#ifndef MT_BASE_TD
#define MT_BASE_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/EnumAttr.td"

def Mt_Dialect : Dialect {
  let name = "mt";
  let cppNamespace = "::mlir::mt";
  let summary = "Operations of a decoder-only transformer's training step";
  let description = [{
    A model is a graph of `mt` ops on builtin ranked tensors. The batch and
    sequence dimensions stay dynamic (`?`) in model files; `mt-specialize` fixes
    them for one compilation. Parameters are ops (`mt.param`) named by a path,
    so that a layout never changes a model file.
  }];
}

def Mt_InitZeros  : I32EnumAttrCase<"zeros", 0>;
def Mt_InitOnes   : I32EnumAttrCase<"ones", 1>;
def Mt_InitNormal : I32EnumAttrCase<"normal", 2>;
def Mt_InitKind : I32EnumAttr<"InitKind", "parameter initialisation rule",
    [Mt_InitZeros, Mt_InitOnes, Mt_InitNormal]> {
  let cppNamespace = "::mlir::mt";
}

class Mt_Op<string mnemonic, list<Trait> traits = []>
    : Op<Mt_Dialect, mnemonic, traits>;

#endif
