// The plan encoding by name, and the encodings of the other dialects' ops a plan holds.
#include "dialects/mt/PlanEncoding.h"
#include "dialects/mt/Collectives.h"

#include "flatbuffers/minireflect.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "plan/SchemaFields.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"

#include <limits>

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

// Ops spell a few fields their own way: attention's `dropout` is a rate; an embedding
// (gradient)'s table rows are a count.
const std::pair<StringLiteral, StringLiteral> kSpellings[] = {
    {"dropout", "rate"}, {"num_embeddings", "count"}, {"num_positions", "count"}};
// Said by the instruction's buffers (keep_mask, keep_stats: a second output), by its
// opcode (ring: RingAttention), or of the IR alone (grid, grid_axis: the group that the
// plan's grid already gives).
const StringLiteral kIrOnly[] = {"keep_mask", "keep_stats", "grid",
                                 "grid_axis", "ring",       "capacity_factor"};
// Fields the emitter fills from the op's operands and results, never from an attribute.
const StringLiteral kBufferFields[] = {"opcode", "inputs", "outputs"};

/// The field an attribute named `name` fills.
StringRef fieldFor(StringRef name) {
  for (const auto &[spelling, field] : kSpellings)
    if (spelling == name)
      return field;
  return name;
}

/// plan.fbs's Instruction as flatc describes it (--reflect-names): its fields in order.
const flatbuffers::TypeTable &schema() { return *plan::InstructionTypeTable(); }

/// The index of the schema's field `name`, or -1.
int fieldIndex(StringRef name) {
  if (llvm::is_contained(kBufferFields, name))
    return -1;
  for (size_t i = 0; i < schema().num_elems; ++i)
    if (name == schema().names[i])
      return static_cast<int>(i);
  return -1;
}

} // namespace

void PlanInstruction::set(StringRef name, Attribute value) {
  for (auto &field : fields)
    if (field.first == name) {
      field.second = value;
      return;
    }
  fields.emplace_back(name, value);
}

std::string mlir::mt::planOpcodeName(OperationName op) {
  return llvm::convertToCamelFromSnakeCase(op.stripDialect(), /*capitalizeFirst=*/true);
}

bool mlir::mt::encodesAttribute(StringRef name, plan::Opcode opcode) {
  return fieldIndex(fieldFor(name)) >= 0 || (name == "name" && opcode == plan::Opcode::ParamGrad) ||
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
    if (name == "name" && inst.opcode == plan::Opcode::ParamGrad)
      inst.param = cast<StringAttr>(*value).getValue();
    else if (!llvm::is_contained(kIrOnly, name))
      inst.set(fieldFor(name), *value);
  }
  return success();
}

namespace {

/// A field's value as its schema type holds it: an integer (flags and enums too) or a
/// float.
struct Scalar {
  flatbuffers::ElementaryType type;
  int64_t integer = 0;
  double number = 0;
};

/// The value of `value` for schema field `index`, or an error at `op`.
FailureOr<Scalar> scalarOf(Operation *op, StringRef name, int index, Attribute value) {
  const flatbuffers::TypeCode code = schema().type_codes[index];
  Scalar s{static_cast<flatbuffers::ElementaryType>(code.base_type)};
  auto refuse = [&](StringRef why) { return op->emitOpError("attribute '") << name << "' " << why; };
  if (code.is_repeating || !plan::withScalarType(s.type, [](auto) {}))
    return refuse("names a plan field that holds no value");
  switch (s.type) {
  case flatbuffers::ET_BOOL:
    if (auto flag = dyn_cast<BoolAttr>(value))
      s.integer = flag.getValue();
    else if (isa<UnitAttr>(value))
      s.integer = 1;
    else
      return refuse("must be a unit attribute to be written to a plan");
    return s;
  case flatbuffers::ET_FLOAT:
  case flatbuffers::ET_DOUBLE:
    if (auto number = dyn_cast<FloatAttr>(value)) {
      s.number = number.getValueAsDouble();
      return s;
    }
    return refuse("must be a float to be written to a plan");
  default:
    break;
  }
  if (code.sequence_ref >= 0) { // an enum, by its names
    auto text = dyn_cast<StringAttr>(value);
    if (!text)
      return refuse("must be a string to be written to a plan");
    const flatbuffers::TypeTable *named = schema().type_refs[code.sequence_ref]();
    for (size_t i = 0; i < named->num_elems; ++i)
      if (text.getValue().equals_insensitive(named->names[i])) {
        s.integer = named->values ? named->values[i] : static_cast<int64_t>(i);
        return s;
      }
    return refuse("has no plan value ") << text;
  }
  auto integer = dyn_cast<IntegerAttr>(value);
  if (!integer || isa<BoolAttr>(value))
    return refuse("must be an integer to be written to a plan");
  s.integer = integer.getType().isUnsignedInteger()
                  ? static_cast<int64_t>(integer.getValue().getZExtValue())
                  : integer.getValue().getSExtValue();
  bool fits = true; // a 64-bit field holds any int64_t
  plan::withScalarType(s.type, [&](auto held) {
    using T = decltype(held);
    if constexpr (sizeof(T) < sizeof(int64_t))
      fits = s.integer >= std::numeric_limits<T>::min() &&
             s.integer <= std::numeric_limits<T>::max();
  });
  if (!fits)
    return refuse("does not fit its plan field: ") << s.integer;
  return s;
}

/// Writes `s` as field `index` of the table being built.
void addScalar(flatbuffers::FlatBufferBuilder &fbb, int index, const Scalar &s) {
  plan::withScalarType(s.type, [&](auto held) {
    using T = decltype(held);
    fbb.AddElement<T>(plan::fieldOffset(index), std::is_floating_point_v<T>
                                                    ? static_cast<T>(s.number)
                                                    : static_cast<T>(s.integer));
  });
}

} // namespace

FailureOr<flatbuffers::Offset<plan::Instruction>>
mlir::mt::writeInstruction(flatbuffers::FlatBufferBuilder &fbb, Operation *op,
                           const PlanInstruction &inst, ArrayRef<uint32_t> inputs,
                           ArrayRef<uint32_t> outputs) {
  SmallVector<std::pair<int, Scalar>> values;
  for (const auto &[name, value] : inst.fields) {
    const int index = fieldIndex(name);
    if (index < 0)
      return op->emitOpError("attribute '") << name << "' has no field in a plan instruction";
    FailureOr<Scalar> scalar = scalarOf(op, name, index, value);
    if (failed(scalar))
      return failure();
    values.emplace_back(index, *scalar);
  }
  // Widest first, as flatc's builders add them, so that the scalars need the least padding.
  llvm::stable_sort(values, [](const auto &a, const auto &b) {
    return flatbuffers::InlineSize(a.second.type, nullptr) >
           flatbuffers::InlineSize(b.second.type, nullptr);
  });
  auto in = fbb.CreateVector(inputs.data(), inputs.size());
  auto out = fbb.CreateVector(outputs.data(), outputs.size());
  const flatbuffers::uoffset_t start = fbb.StartTable();
  for (const auto &[index, scalar] : values)
    addScalar(fbb, index, scalar);
  fbb.AddOffset(plan::Instruction::VT_INPUTS, in);
  fbb.AddOffset(plan::Instruction::VT_OUTPUTS, out);
  fbb.AddElement<uint16_t>(plan::Instruction::VT_OPCODE, static_cast<uint16_t>(inst.opcode), 0);
  return flatbuffers::Offset<plan::Instruction>(fbb.EndTable(start));
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
    Builder b(op->getContext());
    inst.set("value", b.getF64FloatAttr(dense.getSplatValue<APFloat>().convertToDouble()));
    if (op->hasAttr(kLossSeedAttr))
      inst.set("loss_seed", b.getUnitAttr());
    return success();
  }
};

/// The group of the grid a collective over `axes` runs in: the tensor-parallel one, or
/// the context-parallel one (plan.fbs: CommGroup).
LogicalResult setGroup(Operation *op, ArrayRef<int16_t> axes, PlanInstruction &inst) {
  if (axes.size() != 1 || (axes[0] != kTpAxis && axes[0] != kCpAxis))
    return op->emitOpError("plan: a collective runs over one axis of the grid, the tensor- "
                           "or the context-parallel one");
  if (axes[0] == kCpAxis) // the tensor-parallel group is the schema's default
    inst.set("group", StringAttr::get(op->getContext(), "Context"));
  return success();
}

struct AllReduceEncoding : PlanOpInterface::ExternalModel<AllReduceEncoding, shard::AllReduceOp> {
  LogicalResult encodeInstruction(Operation *op, PlanInstruction &inst) const {
    inst.opcode = plan::Opcode::AllReduce;
    return setGroup(op, cast<shard::AllReduceOp>(op).getGridAxes(), inst);
  }
};

struct AllGatherEncoding : PlanOpInterface::ExternalModel<AllGatherEncoding, shard::AllGatherOp> {
  LogicalResult encodeInstruction(Operation *op, PlanInstruction &inst) const {
    inst.opcode = plan::Opcode::AllGather;
    inst.set("axis", cast<shard::AllGatherOp>(op).getGatherAxisAttr());
    return setGroup(op, cast<shard::AllGatherOp>(op).getGridAxes(), inst);
  }
};

struct ReduceScatterEncoding
    : PlanOpInterface::ExternalModel<ReduceScatterEncoding, shard::ReduceScatterOp> {
  LogicalResult encodeInstruction(Operation *op, PlanInstruction &inst) const {
    inst.opcode = plan::Opcode::ReduceScatter;
    inst.set("axis", cast<shard::ReduceScatterOp>(op).getScatterAxisAttr());
    return setGroup(op, cast<shard::ReduceScatterOp>(op).getGridAxes(), inst);
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
