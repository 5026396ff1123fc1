#include "compiler/PlanEmitter.h"
#include "plan/Schedule.h"
#include "dialects/mt/MtDialect.h"
#include "dialects/mt/PlanEncoding.h"
#include "passes/Passes.h"
#include "core/DType.h"
#include "plan/Opcodes.h"
#include "plan/PlanFormat.h"
#include "plan_generated.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/StringMap.h"

using namespace mlir;
namespace fb = flatbuffers;
namespace plan = ::mt::plan;

namespace mtc {
namespace {

FailureOr<plan::DType> dtypeOf(Type element) {
  if (element.isF32())
    return plan::DType::F32;
  if (element.isF64())
    return plan::DType::F64;
  if (element.isBF16())
    return plan::DType::BF16;
  if (element.isF16())
    return plan::DType::F16;
  if (element.isInteger(32))
    return plan::DType::I32;
  if (element.isInteger(64))
    return plan::DType::I64;
  if (element.isInteger(8))
    return plan::DType::I8;
  return failure();
}

plan::DType precisionType(const std::string &precision) {
  if (precision == "f64")
    return plan::DType::F64;
  if (precision == "bf16")
    return plan::DType::BF16;
  if (precision == "f16")
    return plan::DType::F16;
  return plan::DType::F32;
}

/// Where a program sits in the pipeline, and how it talks to its neighbours.
struct ProgramRole {
  int32_t stage = 0, chunk = 0;
  bool backward = false;
  bool receives = false, sends = false, returnsLoss = false;
};

class Emitter {
public:
  LogicalResult run(ModuleOp module, const PlanHeader &header, std::vector<uint8_t> &file);

private:
  LogicalResult addBuffer(Value v, plan::BufferKind kind, uint64_t offset, int32_t param);
  FailureOr<uint32_t> gradBuffer(StringRef name, Operation *user);
  FailureOr<fb::Offset<plan::Program>> emitProgram(func::FuncOp fn, const ProgramRole &role);
  /// A parameter into the plan's table (once, under its name) and its buffer.
  LogicalResult emitParam(mlir::mt::ParamOp param);
  /// An op's results into buffers and the op into an instruction.
  LogicalResult emitInstruction(Operation &op);

  /// A parameter of the plan: its index and what its gradient buffer is.
  struct ParamEntry {
    int32_t index;
    std::vector<int64_t> shape; // this rank's
    plan::DType master;         // the type of the master weights and the gradient
  };
  fb::FlatBufferBuilder fbb;
  std::vector<fb::Offset<plan::Param>> params;
  llvm::StringMap<ParamEntry> paramIndex;
  // Per program:
  std::vector<fb::Offset<plan::Buffer>> buffers;
  std::vector<fb::Offset<plan::Instruction>> instructions;
  DenseMap<Value, uint32_t> bufferOf;
  llvm::StringMap<uint32_t> gradBufferOf;
};

LogicalResult Emitter::addBuffer(Value v, plan::BufferKind kind, uint64_t offset,
                                 int32_t param) {
  auto type = cast<RankedTensorType>(v.getType());
  FailureOr<plan::DType> dtype = dtypeOf(type.getElementType());
  if (failed(dtype))
    return emitError(v.getLoc(), "plan: unsupported element type ") << type;
  bufferOf[v] = static_cast<uint32_t>(buffers.size());
  buffers.push_back(plan::CreateBuffer(fbb, fbb.CreateVector(type.getShape().vec()), *dtype,
                                       kind, offset, mlir::mt::tensorBytes(type), param));
  return success();
}

/// The program's buffer of parameter `name`'s gradient, made on first use.
FailureOr<uint32_t> Emitter::gradBuffer(StringRef name, Operation *user) {
  auto param = paramIndex.find(name);
  if (param == paramIndex.end())
    return user->emitOpError("plan: no parameter '") << name << "' in this program";
  auto [it, inserted] = gradBufferOf.try_emplace(name, static_cast<uint32_t>(buffers.size()));
  if (inserted) {
    const ParamEntry &p = param->second;
    int64_t bytes = ::mt::dtypeBytes(p.master);
    for (int64_t d : p.shape)
      bytes *= d;
    buffers.push_back(plan::CreateBuffer(fbb, fbb.CreateVector(p.shape), p.master,
                                         plan::BufferKind::Grad, 0,
                                         static_cast<uint64_t>(bytes), p.index));
  }
  return it->second;
}

LogicalResult Emitter::emitParam(mlir::mt::ParamOp param) {
  auto type = cast<RankedTensorType>(param.getType());
  // A 16-bit parameter is the programs' compute copy; the parameter itself (master
  // weights, gradient, optimizer state) is in the accumulator type.
  const plan::DType master = ::mt::accumulatorType(*dtypeOf(type.getElementType()));
  auto [it, inserted] = paramIndex.try_emplace(
      param.getName(),
      ParamEntry{static_cast<int32_t>(params.size()), type.getShape().vec(), master});
  if (inserted) {
    auto init = static_cast<plan::Init>(param.getInit());
    std::vector<int64_t> global = type.getShape().vec();
    if (auto g = param.getGlobalShape())
      global.assign(g->begin(), g->end());
    params.push_back(plan::CreateParam(
        fbb, fbb.CreateString(param.getName().str()), fbb.CreateVector(type.getShape().vec()),
        master, init, param.getStd() ? param.getStd()->convertToDouble() : 0.0,
        fbb.CreateVector(global),
        param.getShardDim() ? static_cast<int32_t>(*param.getShardDim()) : -1,
        param.getTpGradReduce(),
        param.getVocabRows() ? static_cast<int64_t>(*param.getVocabRows()) : 0,
        param.getExpertParallel()));
  }
  return addBuffer(param.getResult(), plan::BufferKind::Param, 0, it->second.index);
}

LogicalResult Emitter::emitInstruction(Operation &op) {
  // A gradient its producer has added into the parameter's already.
  if (auto grad = dyn_cast<mlir::mt::ParamGradOp>(op);
      grad && mlir::mt::isAccumulated(grad.getGrad()))
    return success();
  auto offsets = op.getAttrOfType<DenseI64ArrayAttr>(mlir::mt::kOffsetsAttr);
  if (op.getNumResults() && (!offsets || offsets.size() != op.getNumResults()))
    return op.emitOpError("has no planned offsets (run mt-memory-plan)");
  for (auto [i, r] : llvm::enumerate(op.getResults())) {
    if (mlir::mt::isAccumulated(r)) { // the parameter's gradient itself
      auto grad = cast<mlir::mt::ParamGradOp>(*r.getUsers().begin());
      FailureOr<uint32_t> id = gradBuffer(grad.getName(), grad);
      if (failed(id))
        return failure();
      bufferOf[r] = *id;
    } else if (failed(addBuffer(r, plan::BufferKind::Activation, offsets[i], -1))) {
      return failure();
    }
  }

  auto encodable = dyn_cast<mlir::mt::PlanOpInterface>(op);
  if (!encodable)
    return op.emitOpError("cannot be written to a plan");
  mlir::mt::PlanInstruction f;
  if (failed(encodable.encodeInstruction(f)))
    return failure();
  std::vector<uint32_t> inputs, outputs;
  for (Value v : op.getOperands())
    inputs.push_back(bufferOf.at(v));
  for (Value v : op.getResults())
    outputs.push_back(bufferOf.at(v));
  if (f.opcode == plan::Opcode::ParamGrad) {
    FailureOr<uint32_t> id = gradBuffer(f.param, &op);
    if (failed(id))
      return failure();
    outputs.push_back(*id);
  }
  // The runtime's opcode table is the contract: an op that disagrees with its row is
  // named here, not by the plan reader on some GPU node.
  const ::mt::OpcodeInfo &info = ::mt::opcodeInfo(f.opcode);
  const int numInputs = static_cast<int>(inputs.size());
  const int numOutputs = static_cast<int>(outputs.size());
  if (numInputs < info.minInputs || numInputs > info.maxInputs ||
      numOutputs < info.minOutputs || numOutputs > info.maxOutputs)
    return op.emitOpError("plan: ")
           << numInputs << " operands and " << numOutputs << " results, but opcode "
           << plan::EnumNameOpcode(f.opcode) << " takes " << info.minInputs << "-"
           << info.maxInputs << " and " << info.minOutputs << "-" << info.maxOutputs
           << " (runtime/plan/Opcodes.def)";
  auto written = mlir::mt::writeInstruction(fbb, &op, f, inputs, outputs);
  if (failed(written))
    return failure();
  instructions.push_back(*written);
  return success();
}

FailureOr<fb::Offset<plan::Program>> Emitter::emitProgram(func::FuncOp fn,
                                                          const ProgramRole &role) {
  buffers.clear();
  instructions.clear();
  bufferOf.clear();
  gradBufferOf.clear();
  auto arena = fn->getAttrOfType<IntegerAttr>(mlir::mt::kArenaBytesAttr);
  auto argOffsets = fn->getAttrOfType<DenseI64ArrayAttr>(mlir::mt::kArgOffsetsAttr);
  if (!arena || !argOffsets || fn.getNumArguments() < 2)
    return fn.emitError("plan: @") << fn.getName()
                                   << "(tokens, targets, ...) must be memory-planned first";
  for (BlockArgument arg : fn.getArguments())
    if (failed(addBuffer(arg, plan::BufferKind::Input, argOffsets[arg.getArgNumber()], -1)))
      return failure();

  func::ReturnOp ret;
  for (Operation &op : fn.getBody().front()) {
    if (auto r = dyn_cast<func::ReturnOp>(op)) {
      ret = r;
      continue;
    }
    if (auto param = dyn_cast<mlir::mt::ParamOp>(op)) {
      if (failed(emitParam(param)))
        return failure();
      continue;
    }
    if (failed(emitInstruction(op)))
      return failure();
  }

  // The interface: arguments (tokens, targets, [received], [stash in]) and results
  // ([loss or sent], [stash out]).
  unsigned arg = 2, result = 0;
  int32_t recv = -1, send = -1, loss = -1;
  std::vector<uint32_t> stash;
  if (role.receives)
    recv = static_cast<int32_t>(bufferOf.at(fn.getArgument(arg++)));
  if (role.returnsLoss)
    loss = static_cast<int32_t>(bufferOf.at(ret.getOperand(result++)));
  else if (role.sends)
    send = static_cast<int32_t>(bufferOf.at(ret.getOperand(result++)));
  if (role.backward)
    for (; arg < fn.getNumArguments(); ++arg)
      stash.push_back(bufferOf.at(fn.getArgument(arg)));
  else
    for (; result < ret.getNumOperands(); ++result)
      stash.push_back(bufferOf.at(ret.getOperand(result)));
  return plan::CreateProgram(
      fbb, fbb.CreateString(fn.getName().str()), fbb.CreateVector(buffers),
      fbb.CreateVector(instructions), static_cast<uint64_t>(arena.getInt()),
      bufferOf.at(fn.getArgument(0)), bufferOf.at(fn.getArgument(1)), loss, role.stage,
      role.chunk, role.backward, recv, send, fbb.CreateVector(stash));
}

LogicalResult Emitter::run(ModuleOp module, const PlanHeader &header,
                           std::vector<uint8_t> &file) {
  std::vector<fb::Offset<plan::Program>> programs;
  std::vector<fb::Offset<plan::Stage>> stages;
  const int64_t microBatches = header.globalBatchSize / (header.microBatchSize * header.dp);
  if (auto step = module.lookupSymbol<func::FuncOp>("train_step")) {
    ProgramRole whole;
    whole.returnsLoss = true;
    FailureOr<fb::Offset<plan::Program>> program = emitProgram(step, whole);
    if (failed(program))
      return failure();
    programs.push_back(*program);
    // One stage: this data-parallel rank's micro-batches forward and backward, the
    // gradient synchronisation, then the update.
    std::vector<plan::Action> actions;
    for (int64_t m = 0; m < microBatches; ++m)
      actions.emplace_back(plan::ActionKind::ForwardBackward, 0, static_cast<uint32_t>(m));
    actions.emplace_back(plan::ActionKind::GradSync, 0, 0);
    actions.emplace_back(plan::ActionKind::OptimizerStep, 0, 0);
    stages.push_back(plan::CreateStage(fbb, fbb.CreateVectorOfStructs(actions)));
  } else {
    // Pipeline: programs 2v and 2v + 1 are virtual stage v's forward and backward.
    const int64_t virtualStages = header.pp * header.virtualStages;
    for (int64_t v = 0; v < virtualStages; ++v)
      for (bool backward : {false, true}) {
        std::string name = (backward ? "backward_" : "forward_") + std::to_string(v);
        auto fn = module.lookupSymbol<func::FuncOp>(name);
        if (!fn)
          return module.emitError("plan: no @") << name << " (run mt-pipeline-partition)";
        ProgramRole role;
        role.stage = static_cast<int32_t>(v % header.pp);
        role.chunk = static_cast<int32_t>(v / header.pp);
        role.backward = backward;
        role.receives = backward ? v + 1 < virtualStages : v > 0;
        role.sends = backward ? v > 0 : v + 1 < virtualStages;
        role.returnsLoss = !backward && v + 1 == virtualStages;
        FailureOr<fb::Offset<plan::Program>> program = emitProgram(fn, role);
        if (failed(program))
          return failure();
        programs.push_back(*program);
      }
    ::mt::PipelineSchedule schedule;
    if (std::string error = ::mt::buildSchedule(header.schedule, header.pp, header.virtualStages,
                                          microBatches, schedule);
        !error.empty())
      return module.emitError("plan: ") << error;
    ::mt::ScheduleCheck check = ::mt::checkSchedule(schedule);
    if (!check.deadlockFree)
      return module.emitError("plan: schedule: ") << check.problem;
    for (size_t s = 0; s < schedule.perStage.size(); ++s) {
      const std::vector<::mt::PipelineAction> &order = schedule.perStage[s];
      std::vector<plan::Action> actions;
      for (const ::mt::PipelineAction &a : order)
        actions.emplace_back(a.forward ? plan::ActionKind::Forward : plan::ActionKind::Backward,
                             static_cast<uint16_t>(a.chunk),
                             static_cast<uint32_t>(a.microBatch));
      actions.emplace_back(plan::ActionKind::GradSync, 0, 0);
      actions.emplace_back(plan::ActionKind::OptimizerStep, 0, 0);
      const MemoryReport held = s < header.stages.size() ? header.stages[s] : MemoryReport{};
      stages.push_back(plan::CreateStage(
          fbb, fbb.CreateVectorOfStructs(actions),
          s < header.stashBytes.size() ? static_cast<uint64_t>(header.stashBytes[s]) : 0,
          held.weights, held.gradients, held.optimizer, held.activations));
    }
  }

  const MemoryReport &m = header.memory;
  auto accounting = plan::CreateAccounting(
      fbb, header.parameters, header.costs.gemmFlops, header.costs.otherFlops, m.weights,
      m.gradients, m.optimizer, m.activations);
  auto root = plan::CreatePlan(
      fbb, fbb.CreateString(header.model),
      plan::CreateGrid(fbb, static_cast<int32_t>(header.tp), static_cast<int32_t>(header.pp),
                       static_cast<int32_t>(header.dp), static_cast<int32_t>(header.cp),
                       static_cast<int32_t>(header.ep)),
      header.microBatchSize, header.globalBatchSize, header.seqLength, header.vocabSize,
      precisionType(header.precision), header.sequenceParallel,
      static_cast<int32_t>(header.virtualStages), header.distributedOptimizer,
      header.ddpBucketBytes, fbb.CreateVector(params), fbb.CreateVector(programs),
      fbb.CreateVector(stages), accounting);
  plan::FinishPlanBuffer(fbb, root);
  file = plan::framePlan(fbb.GetBufferPointer(), fbb.GetSize());
  return success();
}

} // namespace

LogicalResult emitPlan(ModuleOp module, const PlanHeader &header, std::vector<uint8_t> &file) {
  return Emitter().run(module, header, file);
}

} // namespace mtc
