// The rules every mt op carries, checked over the whole dialect: each op that is a plan
// instruction has an opcode in the plan schema and each opcode an op, so a new op or
// opcode cannot be half added; and the encoding by name fills the fields it should.
#include "compiler/Registration.h"
#include "dialects/mt/PlanEncoding.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"

#include <gtest/gtest.h>

#include <iterator>
#include <set>
#include <string>

using namespace mlir;
namespace plan = ::mt::plan;

namespace {

struct OpRulesTest : ::testing::Test {
  OpRulesTest() : context(registry()) { context.loadAllAvailableDialects(); }
  static DialectRegistry registry() {
    DialectRegistry r;
    mtc::registerAll(r);
    return r;
  }
  MLIRContext context;
};

TEST_F(OpRulesTest, EveryInstructionOpHasAnOpcodeAndEveryOpcodeAnOp) {
  std::set<std::string> encoded;
  for (RegisteredOperationName name : context.getRegisteredOperations()) {
    if (name.getDialectNamespace() != "mt" || !name.hasInterface<mlir::mt::PlanOpInterface>())
      continue;
    std::string opcode = mlir::mt::planOpcodeName(name);
    EXPECT_TRUE(succeeded(mlir::mt::planOpcodeNamed(opcode)))
        << name.getStringRef().str() << " is a plan instruction without opcode " << opcode;
    encoded.insert(opcode);
    if (FailureOr<plan::Opcode> code = mlir::mt::planOpcodeNamed(opcode); succeeded(code)) {
      for (StringAttr attr : name.getAttributeNames()) {
        EXPECT_TRUE(mlir::mt::encodesAttribute(attr.getValue(), *code))
            << name.getStringRef().str() << "'s attribute " << attr.getValue().str()
            << " has no field in a plan instruction";
      }
    }
  }
  // Opcodes other dialects' ops encode (arith.constant, the shard collectives), and those
  // of attention's ring form (AttentionRingEncodesItsOwnOpcode).
  for (const char *external :
       {"Fill", "AllReduce", "AllGather", "ReduceScatter", "RingAttention", "RingAttentionGrad"})
    encoded.insert(external);
  for (size_t i = 0; i <= static_cast<size_t>(plan::Opcode::MAX); ++i)
    EXPECT_TRUE(encoded.count(plan::EnumNamesOpcode()[i]))
        << "opcode " << plan::EnumNamesOpcode()[i] << " has no op that writes it";
}

TEST_F(OpRulesTest, AttentionRingEncodesItsOwnOpcode) {
  OpBuilder b(&context);
  Location loc = b.getUnknownLoc();
  Block block;
  Value qkv = block.addArgument(RankedTensorType::get({2, 4, 24}, b.getF32Type()), loc);
  b.setInsertionPointToStart(&block);
  auto attention = mlir::mt::AttentionOp::create(
      b, loc, qkv, b.getI64IntegerAttr(2), IntegerAttr(), b.getUnitAttr(), FloatAttr(),
      IntegerAttr(), UnitAttr(), b.getUnitAttr(), b.getI64IntegerAttr(2), b.getUnitAttr(),
      IntegerAttr());
  mlir::mt::PlanInstruction inst;
  ASSERT_TRUE(
      succeeded(cast<mlir::mt::PlanOpInterface>(attention.getOperation()).encodeInstruction(inst)));
  EXPECT_EQ(inst.opcode, plan::Opcode::RingAttention);
  auto grad = mlir::mt::AttentionGradOp::create(
      b, loc, attention.getResult(), qkv, attention.getResult(), attention.getStats(),
      b.getI64IntegerAttr(2), IntegerAttr(), b.getUnitAttr(), FloatAttr(), IntegerAttr(),
      UnitAttr(), b.getI64IntegerAttr(2), b.getUnitAttr(), IntegerAttr());
  ASSERT_TRUE(
      succeeded(cast<mlir::mt::PlanOpInterface>(grad.getOperation()).encodeInstruction(inst)));
  EXPECT_EQ(inst.opcode, plan::Opcode::RingAttentionGrad);
}

TEST_F(OpRulesTest, AttributesGoToTheirFieldsByName) {
  OpBuilder b(&context);
  Location loc = b.getUnknownLoc();
  auto qkv = RankedTensorType::get({2, 4, 24}, b.getF32Type());
  Block block;
  Value input = block.addArgument(qkv, loc);
  b.setInsertionPointToStart(&block);
  auto attention = mlir::mt::AttentionOp::create(
      b, loc, input, b.getI64IntegerAttr(2), b.getI64IntegerAttr(1), b.getUnitAttr(),
      b.getF64FloatAttr(0.25), b.getI64IntegerAttr(7), b.getUnitAttr(), UnitAttr(), IntegerAttr(),
      UnitAttr(), b.getI64IntegerAttr(5));
  mlir::mt::PlanInstruction inst;
  ASSERT_TRUE(succeeded(
      cast<mlir::mt::PlanOpInterface>(attention.getOperation()).encodeInstruction(inst)));
  EXPECT_EQ(inst.opcode, plan::Opcode::Attention);
  // Written as the plan holds them, read back through the generated accessors.
  flatbuffers::FlatBufferBuilder fbb;
  auto written = mlir::mt::writeInstruction(fbb, attention.getOperation(), inst, {0}, {1, 2});
  ASSERT_TRUE(succeeded(written));
  fbb.Finish(*written);
  auto *read = flatbuffers::GetRoot<plan::Instruction>(fbb.GetBufferPointer());
  EXPECT_EQ(read->opcode(), plan::Opcode::Attention);
  EXPECT_EQ(read->inputs()->size(), 1u);
  EXPECT_EQ(read->outputs()->Get(1), 2u);
  EXPECT_EQ(read->heads(), 2);
  EXPECT_EQ(read->kv_heads(), 1);
  EXPECT_TRUE(read->causal());
  EXPECT_EQ(read->window(), 5);
  EXPECT_EQ(read->rate(), 0.25); // attention's `dropout`
  EXPECT_EQ(read->stream(), 7);
  EXPECT_TRUE(read->head_parallel());
  EXPECT_FALSE(read->vocab_parallel());
  EXPECT_EQ(read->num_classes(), 0); // unset: the schema's default
}

TEST_F(OpRulesTest, AFieldTheSchemaLacksOrCannotHoldIsRefusedByName) {
  OpBuilder b(&context);
  Block block;
  b.setInsertionPointToStart(&block);
  Operation *op = mlir::mt::ParamOp::create(
      b, b.getUnknownLoc(), RankedTensorType::get({4}, b.getF32Type()), "w",
      mlir::mt::InitKind::zeros, nullptr, nullptr, nullptr, false, nullptr);
  std::string message;
  ScopedDiagnosticHandler handler(&context, [&](Diagnostic &d) {
    message = d.str();
    return success();
  });
  auto refusal = [&](StringRef field, Attribute value) {
    mlir::mt::PlanInstruction inst;
    inst.set(field, value);
    flatbuffers::FlatBufferBuilder fbb;
    message.clear();
    EXPECT_TRUE(failed(mlir::mt::writeInstruction(fbb, op, inst, {}, {})));
    return message;
  };
  EXPECT_EQ(refusal("no_such_field", b.getUnitAttr()),
            "'mt.param' op attribute 'no_such_field' has no field in a plan instruction");
  EXPECT_EQ(refusal("inputs", b.getI64IntegerAttr(1)),
            "'mt.param' op attribute 'inputs' has no field in a plan instruction");
  EXPECT_EQ(refusal("heads", b.getF64FloatAttr(2)),
            "'mt.param' op attribute 'heads' must be an integer to be written to a plan");
  EXPECT_EQ(refusal("rate", b.getI64IntegerAttr(1)),
            "'mt.param' op attribute 'rate' must be a float to be written to a plan");
  EXPECT_EQ(refusal("causal", b.getI64IntegerAttr(1)),
            "'mt.param' op attribute 'causal' must be a unit attribute to be written to a plan");
  EXPECT_EQ(refusal("axis", b.getI64IntegerAttr(int64_t(1) << 40)),
            "'mt.param' op attribute 'axis' does not fit its plan field: 1099511627776");
  EXPECT_EQ(refusal("axis", b.getBoolAttr(true)),
            "'mt.param' op attribute 'axis' must be an integer to be written to a plan");
  EXPECT_EQ(refusal("approximate", b.getStringAttr("erf")),
            "'mt.param' op attribute 'approximate' has no plan value \"erf\"");
  EXPECT_EQ(refusal("approximate", b.getI64IntegerAttr(1)),
            "'mt.param' op attribute 'approximate' must be a string to be written to a plan");
}

// A plan written before a field was added reads it as its default only where the field
// came after every other: FlatBuffers numbers a table's fields by their place. These are
// plan format 2's fields of an instruction, in their order; a new one goes after them.
TEST(PlanSchema, InstructionFieldsAreOnlyAppended) {
  const char *const format2[] = {
      "opcode",          "inputs",           "outputs",           "epsilon",
      "rate",            "value",            "heads",             "causal",
      "stream",          "num_classes",      "count",             "axis",
      "vocab_parallel",  "sequence_parallel", "feature_parallel", "head_parallel",
      "loss_seed",       "theta",            "kv_heads",          "scaling_factor",
      "low_freq_factor", "high_freq_factor", "original_positions", "inverse",
      "accumulate",      "approximate"};
  const flatbuffers::TypeTable &schema = *plan::InstructionTypeTable();
  ASSERT_GE(schema.num_elems, std::size(format2));
  for (size_t i = 0; i < std::size(format2); ++i)
    EXPECT_STREQ(schema.names[i], format2[i]) << "field " << i;
}

TEST_F(OpRulesTest, AnOpWithoutAnOpcodeIsRefusedByName) {
  OpBuilder b(&context);
  Location loc = b.getUnknownLoc();
  Block block;
  b.setInsertionPointToStart(&block);
  auto param = mlir::mt::ParamOp::create(b, loc, RankedTensorType::get({4}, b.getF32Type()), "w",
                                   mlir::mt::InitKind::zeros, /*std=*/nullptr,
                                   /*global_shape=*/nullptr, /*shard_dim=*/nullptr,
                                   /*tp_grad_reduce=*/false, /*vocab_rows=*/nullptr);
  std::string message;
  ScopedDiagnosticHandler handler(&context, [&](Diagnostic &d) {
    message = d.str();
    return success();
  });
  mlir::mt::PlanInstruction inst;
  EXPECT_TRUE(failed(mlir::mt::encodeInstructionByName(param, inst)));
  EXPECT_NE(message.find("has no plan opcode Param"), std::string::npos) << message;
}

} // namespace
