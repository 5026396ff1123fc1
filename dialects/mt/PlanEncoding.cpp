// The plan encoding by name, and the encodings of the other dialects' ops a plan holds.
#include "dialects/mt/PlanEncoding.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/Support/FormatVariadic.h"

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

/// The instruction field an attribute of this name fills. Ops spell a few fields their
/// own way (attention's `dropout` is a rate; an embedding gradient's table rows are a
/// count). Attributes the IR alone needs have no field: `keep_mask` is the mask result's
/// presence, `grid`/`grid_axis` name the group the plan's grid already gives.
enum class Field { None, Epsilon, Rate, Heads, Stream, NumClasses, Count, Param, Causal,
                   VocabParallel, SequenceParallel, FeatureParallel, HeadParallel, Unknown };

Field fieldNamed(StringRef name) {
  return llvm::StringSwitch<Field>(name)
      .Case("epsilon", Field::Epsilon)
      .Cases({"rate", "dropout"}, Field::Rate)
      .Case("heads", Field::Heads)
      .Case("stream", Field::Stream)
      .Case("num_classes", Field::NumClasses)
      .Cases({"num_embeddings", "num_positions"}, Field::Count)
      .Case("name", Field::Param)
      .Case("causal", Field::Causal)
      .Case("vocab_parallel", Field::VocabParallel)
      .Case("sequence_parallel", Field::SequenceParallel)
      .Case("feature_parallel", Field::FeatureParallel)
      .Case("head_parallel", Field::HeadParallel)
      .Cases({"keep_mask", "grid", "grid_axis"}, Field::None)
      .Default(Field::Unknown);
}

} // namespace

LogicalResult mlir::mt::encodeInstructionByName(Operation *op, PlanInstruction &inst) {
  std::string opcode =
      llvm::convertToCamelFromSnakeCase(op->getName().stripDialect(), /*capitalizeFirst=*/true);
  FailureOr<plan::Opcode> found = planOpcodeNamed(opcode);
  if (failed(found))
    return op->emitOpError("has no plan opcode ")
           << opcode << " (add it to runtime/plan/plan.fbs and runtime/plan/Opcodes.def)";
  inst.opcode = *found;
  for (StringAttr name : op->getName().getAttributeNames()) {
    std::optional<Attribute> value = op->getInherentAttr(name);
    if (!value || !*value)
      continue; // an unset optional attribute keeps the schema's default
    auto number = [&] { return cast<FloatAttr>(*value).getValueAsDouble(); };
    auto integer = [&] { return cast<IntegerAttr>(*value).getInt(); };
    switch (fieldNamed(name.getValue())) {
    case Field::None:
      break;
    case Field::Epsilon:
      inst.epsilon = number();
      break;
    case Field::Rate:
      inst.rate = number();
      break;
    case Field::Heads:
      inst.heads = integer();
      break;
    case Field::Stream:
      inst.stream = integer();
      break;
    case Field::NumClasses:
      inst.numClasses = integer();
      break;
    case Field::Count:
      inst.count = integer();
      break;
    case Field::Param:
      inst.param = cast<StringAttr>(*value).getValue();
      break;
    case Field::Causal:
      inst.causal = true;
      break;
    case Field::VocabParallel:
      inst.vocabParallel = true;
      break;
    case Field::SequenceParallel:
      inst.sequenceParallel = true;
      break;
    case Field::FeatureParallel:
      inst.featureParallel = true;
      break;
    case Field::HeadParallel:
      inst.headParallel = true;
      break;
    case Field::Unknown:
      return op->emitOpError("attribute '")
             << name.getValue() << "' has no field in a plan instruction";
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
