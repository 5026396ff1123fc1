#include "core/Executor.h"

#include <new>
#include <sstream>

namespace mt {
namespace {

TensorView viewOf(const flatbuffers::Vector<int64_t> &shape, plan::DType dtype, void *data) {
  TensorView v;
  v.data = data;
  v.dtype = dtype;
  v.rank = static_cast<int>(shape.size());
  for (int i = 0; i < v.rank; ++i)
    v.shape[i] = shape.Get(i);
  return v;
}

} // namespace

Executor::Executor(const plan::Plan &plan, Backend &backend, Comm &comm)
    : plan_(plan), program_(*plan.programs()->Get(0)), backend_(backend), comm_(comm) {}

Executor::~Executor() {
  for (void *p : allocations_)
    backend_.release(p);
}

Status Executor::create(const LoadedPlan &loaded, Backend &backend, Comm &comm,
                        ExecutorOptions options, std::unique_ptr<Executor> &out) {
  std::unique_ptr<Executor> executor(new Executor(loaded.plan(), backend, comm));
  try {
    if (Status s = executor->bind(options); !s.ok())
      return s;
  } catch (const std::bad_alloc &) {
    return Status::failure(cat(backend.name(), ": out of memory binding plan '",
                               loaded.plan().model()->str(), "'"));
  }
  out = std::move(executor);
  return Status::success();
}

Status Executor::bind(ExecutorOptions options) {
  // Weights and gradients: two flat stores, each parameter a contiguous slice, so that
  // gradient buckets and optimizer shards are plain ranges.
  int64_t total = 0;
  for (const plan::Param *p : *plan_.params()) {
    Parameter param;
    param.spec = p;
    param.name = p->name()->str();
    param.offset = total;
    param.numel = 1;
    for (int64_t d : *p->shape())
      param.numel *= d;
    param.bytes = dtypeBytes(p->dtype()) * param.numel;
    total += param.numel;
    parameters_.push_back(param);
  }
  const int64_t parts = plan_.grid()->dp();
  total = (total + parts - 1) / parts * parts;
  const size_t bytes = dtypeBytes(plan_.precision()) * total;
  for (TensorView *flat : {&flatWeights_, &flatGrads_}) {
    flat->data = backend_.allocate(bytes);
    allocations_.push_back(flat->data);
    backend_.setZero(flat->data, bytes);
    flat->dtype = plan_.precision();
    flat->rank = 1;
    flat->shape[0] = total;
  }
  for (Parameter &p : parameters_) {
    const size_t at = dtypeBytes(plan_.precision()) * p.offset;
    p.weight = viewOf(*p.spec->shape(), p.spec->dtype(),
                      static_cast<std::byte *>(flatWeights_.data) + at);
    p.grad = viewOf(*p.spec->shape(), p.spec->dtype(),
                    static_cast<std::byte *>(flatGrads_.data) + at);
  }

  std::byte *arena = nullptr;
  if (!options.separateBuffers) {
    // The arena is followed by a guard region; both start out holding a sentinel, so
    // that the bytes the program actually writes can be measured (arenaBytesWritten).
    arena = static_cast<std::byte *>(backend_.allocate(program_.arena_bytes() + kGuardBytes));
    allocations_.push_back(arena);
    arena_ = arena;
    fillArena(kSentinel);
  }
  for (const plan::Buffer *b : *program_.buffers()) {
    void *data;
    if (b->kind() == plan::BufferKind::Param) {
      data = parameters_[b->param()].weight.data;
    } else if (options.separateBuffers) {
      data = backend_.allocate(b->bytes());
      allocations_.push_back(data);
    } else {
      data = arena + b->offset();
    }
    views_.push_back(viewOf(*b->shape(), b->dtype(), data));
  }
  return Status::success();
}

void Executor::fillArena(uint8_t sentinel) {
  if (!arena_)
    return;
  std::vector<uint8_t> fill(program_.arena_bytes() + kGuardBytes, sentinel);
  backend_.copyToDevice(arena_, fill.data(), fill.size());
}

uint64_t Executor::arenaBytesWritten(uint8_t sentinel) {
  if (!arena_)
    return 0;
  std::vector<uint8_t> bytes(program_.arena_bytes() + kGuardBytes);
  backend_.copyToHost(bytes.data(), arena_, bytes.size());
  uint64_t end = bytes.size();
  while (end > 0 && bytes[end - 1] == sentinel)
    --end;
  return end;
}

int64_t Executor::tokensPerMicroBatch() const { return views_[program_.tokens()].numel(); }

Status Executor::initParameters(uint64_t seed) {
  for (Parameter &p : parameters_)
    backend_.initParameter(p.weight, *p.spec, seed, comm_.rank(Group::Tensor),
                           comm_.size(Group::Tensor));
  return Status::success();
}

void Executor::zeroGradients() {
  backend_.setZero(flatGrads_.data, dtypeBytes(flatGrads_.dtype) * flatGrads_.numel());
}

Status Executor::runCollective(const plan::Instruction &inst, const TensorView &in,
                               const TensorView &out) {
  switch (inst.opcode()) {
  case plan::Opcode::AllReduce:
    return comm_.allReduceSum(Group::Tensor, in, out);
  case plan::Opcode::AllGather:
    return comm_.allGather(Group::Tensor, in, out, inst.axis());
  default:
    return comm_.reduceScatter(Group::Tensor, in, out, inst.axis());
  }
}

Status Executor::setInput(uint32_t buffer, const int32_t *ids) {
  const TensorView &view = views_[buffer];
  if (view.dtype == plan::DType::I32) {
    backend_.copyToDevice(view.data, ids, sizeof(int32_t) * view.numel());
    return Status::success();
  }
  if (view.dtype == plan::DType::I64) {
    std::vector<int64_t> wide(ids, ids + view.numel());
    backend_.copyToDevice(view.data, wide.data(), sizeof(int64_t) * wide.size());
    return Status::success();
  }
  return Status::failure("plan inputs must be i32 or i64 tensors");
}

Status Executor::forwardBackward(const int32_t *tokens, const int32_t *targets,
                                 StepContext context, double &loss) {
  context.tpRank = comm_.rank(Group::Tensor);
  context.tpSize = comm_.size(Group::Tensor);
  if (Status s = setInput(program_.tokens(), tokens); !s.ok())
    return s;
  if (Status s = setInput(program_.targets(), targets); !s.ok())
    return s;
  TensorView in[8], out[8];
  const auto &instructions = *program_.instructions();
  bool backward = false;
  for (flatbuffers::uoffset_t i = 0; i < instructions.size(); ++i) {
    const plan::Instruction &inst = *instructions.Get(i);
    if (!backward && inst.opcode() == plan::Opcode::Fill) {
      backward = true;
      backwardStart_ = std::chrono::steady_clock::now();
    }
    int n = 0;
    for (uint32_t id : *inst.inputs())
      in[n++] = views_[id];
    n = 0;
    for (uint32_t id : *inst.outputs())
      out[n++] = views_[id];
    if (inst.opcode() == plan::Opcode::ParamGrad)
      out[0] = parameters_[inst.param()].grad;
    const bool collective = inst.opcode() == plan::Opcode::AllReduce ||
                            inst.opcode() == plan::Opcode::AllGather ||
                            inst.opcode() == plan::Opcode::ReduceScatter;
    if (Status s = collective ? runCollective(inst, in[0], out[0])
                              : backend_.run(inst, in, out, context);
        !s.ok())
      return Status::failure(cat("instruction ", i, " (",
                                 plan::EnumNameOpcode(inst.opcode()), "): ", s.message()));
  }
  const TensorView &lossView = views_[program_.loss()];
  if (lossView.dtype == plan::DType::F64) {
    backend_.copyToHost(&loss, lossView.data, sizeof(double));
  } else {
    float value;
    backend_.copyToHost(&value, lossView.data, sizeof(float));
    loss = value;
  }
  return Status::success();
}

} // namespace mt
