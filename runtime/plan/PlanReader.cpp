#include "plan/PlanReader.h"
#include "plan/PlanFormat.h"

#include <fstream>
#include <iterator>
#include <sstream>

namespace mt {

size_t dtypeBytes(plan::DType dtype) {
  switch (dtype) {
  case plan::DType::F64:
  case plan::DType::I64:
    return 8;
  case plan::DType::F32:
  case plan::DType::I32:
    return 4;
  case plan::DType::BF16:
  case plan::DType::F16:
    return 2;
  }
  return 0;
}

namespace {

template <typename... Parts> std::string cat(const Parts &...parts) {
  std::ostringstream os;
  (os << ... << parts);
  return os.str();
}

/// Elements × element size, or 0 when a dimension is not positive or it overflows.
uint64_t shapeBytes(const flatbuffers::Vector<int64_t> *shape, plan::DType dtype) {
  if (!shape)
    return 0;
  uint64_t bytes = dtypeBytes(dtype);
  for (int64_t d : *shape) {
    if (d <= 0 || bytes > (uint64_t{1} << 62) / static_cast<uint64_t>(d))
      return 0;
    bytes *= static_cast<uint64_t>(d);
  }
  return bytes;
}

bool sameShape(const flatbuffers::Vector<int64_t> *a, const flatbuffers::Vector<int64_t> *b) {
  if (!a || !b || a->size() != b->size())
    return false;
  for (flatbuffers::uoffset_t i = 0; i < a->size(); ++i)
    if (a->Get(i) != b->Get(i))
      return false;
  return true;
}

/// Inputs and outputs each opcode takes; -1 for "2 or 3" (a linear's optional bias).
struct Arity {
  int inputs, outputs;
};
Arity arityOf(plan::Opcode op) {
  using plan::Opcode;
  switch (op) {
  case Opcode::Fill:
    return {0, 1};
  case Opcode::Gelu:
  case Opcode::Dropout:
  case Opcode::PositionEmbeddingGrad:
  case Opcode::BiasGrad:
  case Opcode::Attention:
    return {1, 1};
  case Opcode::Linear:
    return {-1, 1};
  case Opcode::LayerNorm:
  case Opcode::AttentionGrad:
  case Opcode::CrossEntropyGrad:
    return {3, 1};
  case Opcode::LayerNormGrad:
    return {3, 3};
  case Opcode::ParamGrad:
    return {1, 0};
  case Opcode::Identity:
  case Opcode::AllReduce:
  case Opcode::AllGather:
  case Opcode::ReduceScatter:
    return {1, 1};
  case Opcode::CrossEntropyMerge:
    return {3, 1};
  case Opcode::VocabParallelCrossEntropyGrad:
    return {4, 1};
  default:
    return {2, 1};
  }
}

Status checkProgram(const plan::Plan &p, const plan::Program &prog, size_t index) {
  std::string where = cat("program ", index);
  if (!prog.buffers() || !prog.instructions())
    return Status::failure(cat(where, " has no buffers or no instructions"));
  const auto &buffers = *prog.buffers();
  const size_t numParams = p.params() ? p.params()->size() : 0;
  for (flatbuffers::uoffset_t i = 0; i < buffers.size(); ++i) {
    const plan::Buffer *b = buffers.Get(i);
    uint64_t bytes = shapeBytes(b->shape(), b->dtype());
    if (bytes == 0 || bytes != b->bytes())
      return Status::failure(cat(where, " buffer ", i, ": shape and size disagree"));
    if (b->kind() == plan::BufferKind::Param) {
      if (b->param() < 0 || static_cast<size_t>(b->param()) >= numParams)
        return Status::failure(cat(where, " buffer ", i, " names parameter ", b->param(),
                                   " of ", numParams));
      const plan::Param *param = p.params()->Get(b->param());
      if (!sameShape(param->shape(), b->shape()) || param->dtype() != b->dtype())
        return Status::failure(cat(where, " buffer ", i, " disagrees with parameter ",
                                   b->param()));
    } else if (b->offset() > prog.arena_bytes() ||
               b->bytes() > prog.arena_bytes() - b->offset()) {
      return Status::failure(cat(where, " buffer ", i, " [", b->offset(), ", +", b->bytes(),
                                 ") lies outside the arena of ", prog.arena_bytes(),
                                 " bytes"));
    }
  }
  for (flatbuffers::uoffset_t i = 0; i < prog.instructions()->size(); ++i) {
    const plan::Instruction *inst = prog.instructions()->Get(i);
    std::string at = cat(where, " instruction ", i);
    if (inst->opcode() > plan::Opcode::MAX)
      return Status::failure(cat(at, ": unknown opcode ", static_cast<int>(inst->opcode())));
    if (!inst->inputs() || !inst->outputs())
      return Status::failure(cat(at, ": missing operand lists"));
    Arity arity = arityOf(inst->opcode());
    int numInputs = static_cast<int>(inst->inputs()->size());
    bool inputsOk = arity.inputs < 0 ? (numInputs == 2 || numInputs == 3)
                                     : numInputs == arity.inputs;
    if (!inputsOk || static_cast<int>(inst->outputs()->size()) != arity.outputs)
      return Status::failure(cat(at, " (", plan::EnumNameOpcode(inst->opcode()),
                                 "): wrong number of operands"));
    for (auto list : {inst->inputs(), inst->outputs()})
      for (uint32_t id : *list)
        if (id >= buffers.size())
          return Status::failure(cat(at, " names buffer ", id, " of ", buffers.size()));
    if (inst->opcode() == plan::Opcode::ParamGrad &&
        (inst->param() < 0 || static_cast<size_t>(inst->param()) >= numParams))
      return Status::failure(cat(at, " names parameter ", inst->param(), " of ", numParams));
  }
  for (uint32_t id : {prog.tokens(), prog.targets(), prog.loss()})
    if (id >= buffers.size())
      return Status::failure(cat(where, " names buffer ", id, " of ", buffers.size()));
  return Status::success();
}

Status checkPlan(const plan::Plan &p) {
  if (!p.programs() || p.programs()->size() == 0)
    return Status::failure("plan has no programs");
  if (!p.stages() || p.stages()->size() == 0 || !p.grid() || !p.params() || !p.model())
    return Status::failure("plan has no schedule, rank grid, parameter table or model name");
  if (p.micro_batch_size() <= 0 || p.global_batch_size() <= 0 || p.seq_length() <= 0)
    return Status::failure("plan has non-positive batch or sequence sizes");
  const plan::Grid &grid = *p.grid();
  if (grid.tp() < 1 || grid.dp() < 1 || grid.pp() != 1 ||
      p.global_batch_size() % (p.micro_batch_size() * grid.dp()) != 0)
    return Status::failure("plan's rank grid does not divide its batch");
  for (flatbuffers::uoffset_t i = 0; i < p.params()->size(); ++i) {
    const plan::Param *param = p.params()->Get(i);
    if (!param->name() || shapeBytes(param->shape(), param->dtype()) == 0 ||
        shapeBytes(param->global_shape(), param->dtype()) == 0 ||
        param->global_shape()->size() != param->shape()->size() || param->shard_dim() < -1 ||
        param->shard_dim() >= static_cast<int>(param->shape()->size()))
      return Status::failure(cat("parameter ", i, " has no name or an invalid shape"));
  }
  for (flatbuffers::uoffset_t i = 0; i < p.programs()->size(); ++i)
    if (Status s = checkProgram(p, *p.programs()->Get(i), i); !s.ok())
      return s;
  for (const plan::Stage *stage : *p.stages()) {
    if (!stage->actions())
      return Status::failure("a pipeline stage has no actions");
    for (const plan::Action *a : *stage->actions())
      if (a->chunk() >= p.programs()->size() || a->kind() > plan::ActionKind::MAX)
        return Status::failure(cat("schedule names program ", a->chunk(), " of ",
                                   p.programs()->size()));
  }
  return Status::success();
}

} // namespace

Status LoadedPlan::parse(std::vector<uint8_t> file, const std::string &name,
                         LoadedPlan &out) {
  using namespace plan;
  auto fail = [&](const std::string &why) { return Status::failure(cat(name, ": ", why)); };
  if (file.size() < 4 || std::memcmp(file.data(), kMagic, 4) != 0)
    return fail("not an mtc plan (no MTPL header)");
  if (file.size() < kHeaderBytes + kTrailerBytes)
    return fail(cat("truncated plan: ", file.size(), " bytes, shorter than its header"));
  uint32_t version = static_cast<uint32_t>(getLittleEndian(file.data() + 4, 4));
  if (version != kFormatVersion)
    return fail(cat("plan format version ", version, ", but this build reads version ",
                    kFormatVersion, "; compile the model again with this mtc"));
  uint64_t payload = getLittleEndian(file.data() + 8, 8);
  uint64_t expected = kHeaderBytes + kTrailerBytes;
  if (payload > file.size() || file.size() - expected < payload)
    return fail(cat("truncated plan: header promises ", payload + expected, " bytes, file has ",
                    file.size()));
  if (file.size() - expected != payload)
    return fail(cat("corrupt plan: ", file.size() - expected - payload,
                    " bytes after the end of the plan"));
  uint32_t stored = static_cast<uint32_t>(getLittleEndian(file.data() + kHeaderBytes + payload, 4));
  if (stored != crc32Of(file.data(), kHeaderBytes + payload))
    return fail("corrupt plan: CRC-32 mismatch (damaged or partly written file)");

  const uint8_t *body = file.data() + kHeaderBytes;
  flatbuffers::Verifier verifier(body, payload);
  if (!PlanBufferHasIdentifier(body) || !VerifyPlanBuffer(verifier))
    return fail("corrupt plan: FlatBuffers verification failed");
  if (Status s = checkPlan(*GetPlan(body)); !s.ok())
    return fail("corrupt plan: " + s.message());
  out.bytes_ = std::move(file);
  out.root_ = GetPlan(out.bytes_.data() + kHeaderBytes);
  return Status::success();
}

Status LoadedPlan::read(const std::string &path, LoadedPlan &out) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return Status::failure(cat(path, ": cannot open plan"));
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
  if (in.bad())
    return Status::failure(cat(path, ": read error"));
  return parse(std::move(bytes), path, out);
}

} // namespace mt
