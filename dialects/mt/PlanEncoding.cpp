// The plan encoding by name, and the encodings of the other dialects' ops a plan holds.
#include "dialects/mt/PlanEncoding.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"

using namespace mlir;
using namespace mlir::mt;
namespace plan = ::mt::plan;

FailureOr<plan::Opcode> mlir::mt::planOpcodeNamed(StringRef name) {
  const char *const *names = plan::EnumNamesOpcode();
  for (size_t i = 0; i <= static_cast<size_t>(plan::Opcode::MAX); ++i)
    if (name == names[i])
      return static_cast<plan::Opcode>(i);
  return failure();
}

namespace {

// The instruction field each attribute name fills. Ops spell a few fields their own way
// (attention's `dropout` is a rate; an embedding gradient's table rows are a count).
// Attributes only the IR needs have no field: `keep_mask` is the mask result's
// presence, `grid`/`grid_axis` name the group that the plan's grid already gives.
template <typename T> using Field = std::pair<StringLiteral, T PlanInstruction::*>;
const Field<double> kFloatFields[] = {{"epsilon", &PlanInstruction::epsilon},
                                      {"rate", &PlanInstruction::rate},
                                      {"dropout", &PlanInstruction::rate},
                                      {"theta", &PlanInstruction::theta},
                                      {"scaling_factor", &PlanInstruction::scalingFactor},
                                      {"low_freq_factor", &PlanInstruction::lowFreqFactor},
                                      {"high_freq_factor", &PlanInstruction::highFreqFactor}};
const Field<int64_t> kIntegerFields[] = {{"heads", &PlanInstruction::heads},
                                         {"stream", &PlanInstruction::stream},
                                         {"num_classes", &PlanInstruction::numClasses},
                                         {"num_embeddings", &PlanInstruction::count},
                                         {"num_positions", &PlanInstruction::count},
                                         {"kv_heads", &PlanInstruction::kvHeads},
                                         {"original_positions",
                                          &PlanInstruction::originalPositions}};
const Field<bool> kFlagFields[] = {{"causal", &PlanInstruction::causal},
                                   {"vocab_parallel", &PlanInstruction::vocabParallel},
                                   {"sequence_parallel", &PlanInstruction::sequenceParallel},
                                   {"feature_parallel", &PlanInstruction::featureParallel},
                                   {"head_parallel", &PlanInstruction::headParallel},
                                   {"accumulate", &PlanInstruction::accumulate},
                                   {"inverse", &PlanInstruction::inverse}};
// Said by the instruction's buffers (keep_mask, keep_stats: a second output), or of the
// IR alone.
const StringLiteral kIrOnly[] = {"keep_mask", "keep_stats", "grid", "grid_axis"};

/// The field of `fields` named `name`, or null.
template <typename T, size_t N>
T PlanInstruction::*fieldNamed(const Field<T> (&fields)[N], StringRef name) {
  for (const Field<T> &field : fields)
    if (field.first == name)
      return field.second;
  return nullptr;
}

} // namespace

std::string mlir::mt::planOpcodeName(OperationName op) {
  return llvm::convertToCamelFromSnakeCase(op.stripDialect(), /*capitalizeFirst=*/true);
}

bool mlir::mt::encodesAttribute(StringRef name, plan::Opcode opcode) {
  return fieldNamed(kFloatFields, name) || fieldNamed(kIntegerFields, name) ||
         fieldNamed(kFlagFields, name) || (name == "name" && opcode == plan::Opcode::ParamGrad) ||
         llvm::is_contained(kIrOnly, name);
}

LogicalResult mlir::mt::encodeInstructionByName(Operation *op, PlanInstruction &inst) {
  std::string opcode = planOpcodeName(op->getName());
  FailureOr<plan::Opcode> found = planOpcodeNamed(opcode);
  if (failed(found))
    return op->emitOpError("has no plan opcode ")
           << opcode << " (add it to runtime/plan/plan.fbs and runtime/plan/Opcodes.def)";
  inst.opcode = *found;
  for (StringAttr attrName : op->getName().getAttributeNames()) {
    std::optional<Attribute> value = op->getInherentAttr(attrName);
    if (!value || !*value)
      continue; // an unset optional attribute keeps the schema's default
    StringRef name = attrName.getValue();
    auto mismatch = [&](StringRef kind) {
      return op->emitOpError("attribute '") << name << "' must be " << kind
                                            << " to be written to a plan";
    };
    if (auto field = fieldNamed(kFloatFields, name)) {
      auto number = dyn_cast<FloatAttr>(*value);
      if (!number)
        return mismatch("a float");
      inst.*field = number.getValueAsDouble();
    } else if (auto field = fieldNamed(kIntegerFields, name)) {
      auto integer = dyn_cast<IntegerAttr>(*value);
      if (!integer)
        return mismatch("an integer");
      inst.*field = integer.getInt();
    } else if (auto field = fieldNamed(kFlagFields, name)) {
      if (!isa<UnitAttr>(*value))
        return mismatch("a unit attribute");
      inst.*field = true;
    } else if (name == "name" && inst.opcode == plan::Opcode::ParamGrad) {
      inst.param = cast<StringAttr>(*value).getValue();
    } else if (!llvm::is_contained(kIrOnly, name)) {
      return op->emitOpError("attribute '") << name << "' has no field in a plan instruction";
    }
  }
  return success();
}

namespace {

/// A splat constant (autodiff's loss seed) fills its buffer.
struct ConstantEncoding
    : PlanOpInterface::ExternalModel<ConstantEncoding, arith::ConstantOp> {
  LogicalResult encodeInstruction(Operation *op, PlanInstruction &inst) const {
    auto dense = dyn_cast<DenseFPElementsAttr>(cast<arith::ConstantOp>(op).getValue());
    if (!dense || !dense.isSplat())
      return op->emitOpError("plan: only a splat float constant can be written to a plan");
    inst.opcode = plan::Opcode::Fill;
    inst.value = dense.getSplatValue<APFloat>().convertToDouble();
    inst.lossSeed = op->hasAttr(kLossSeedAttr);
    return success();
  }
};

struct AllReduceEncoding : PlanOpInterface::ExternalModel<AllReduceEncoding, shard::AllReduceOp> {
  LogicalResult encodeInstruction(Operation *, PlanInstruction &inst) const {
    inst.opcode = plan::Opcode::AllReduce;
    return success();
  }
};

struct AllGatherEncoding : PlanOpInterface::ExternalModel<AllGatherEncoding, shard::AllGatherOp> {
  LogicalResult encodeInstruction(Operation *op, PlanInstruction &inst) const {
    inst.opcode = plan::Opcode::AllGather;
    inst.axis = static_cast<int32_t>(cast<shard::AllGatherOp>(op).getGatherAxis().getSExtValue());
    return success();
  }
};

struct ReduceScatterEncoding
    : PlanOpInterface::ExternalModel<ReduceScatterEncoding, shard::ReduceScatterOp> {
  LogicalResult encodeInstruction(Operation *op, PlanInstruction &inst) const {
    inst.opcode = plan::Opcode::ReduceScatter;
    inst.axis =
        static_cast<int32_t>(cast<shard::ReduceScatterOp>(op).getScatterAxis().getSExtValue());
    return success();
  }
};

} // namespace

void mlir::mt::registerPlanEncodings(DialectRegistry &registry) {
  registry.addExtension(+[](MLIRContext *context, arith::ArithDialect *) {
    arith::ConstantOp::attachInterface<ConstantEncoding>(*context);
  });
  registry.addExtension(+[](MLIRContext *context, shard::ShardDialect *) {
    shard::AllReduceOp::attachInterface<AllReduceEncoding>(*context);
    shard::AllGatherOp::attachInterface<AllGatherEncoding>(*context);
    shard::ReduceScatterOp::attachInterface<ReduceScatterEncoding>(*context);
  });
}
