#include "core/Executor.h"

#include <new>
#include <sstream>

namespace mt {
namespace {

template <typename... Parts> std::string cat(const Parts &...parts) {
  std::ostringstream os;
  (os << ... << parts);
  return os.str();
}

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

Executor::Executor(const plan::Plan &plan, Backend &backend)
    : plan_(plan), program_(*plan.programs()->Get(0)), backend_(backend) {}

Executor::~Executor() {
  for (void *p : allocations_)
    backend_.release(p);
}

Status Executor::create(const LoadedPlan &loaded, Backend &backend, ExecutorOptions options,
                        std::unique_ptr<Executor> &out) {
  std::unique_ptr<Executor> executor(new Executor(loaded.plan(), backend));
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
  const auto &params = *plan_.params();
  // Persistent storage: weights and gradients, each parameter contiguous.
  for (const plan::Param *p : params) {
    Parameter param;
    param.spec = p;
    param.name = p->name()->str();
    param.bytes = dtypeBytes(p->dtype());
    for (int64_t d : *p->shape())
      param.bytes *= static_cast<size_t>(d);
    void *w = backend_.allocate(param.bytes);
    allocations_.push_back(w);
    void *g = backend_.allocate(param.bytes);
    allocations_.push_back(g);
    param.weight = viewOf(*p->shape(), p->dtype(), w);
    param.grad = viewOf(*p->shape(), p->dtype(), g);
    parameters_.push_back(param);
  }

  std::byte *arena = nullptr;
  if (!options.separateBuffers) {
    arena = static_cast<std::byte *>(backend_.allocate(program_.arena_bytes()));
    allocations_.push_back(arena);
  }
  for (const plan::Buffer *b : *program_.buffers()) {
    void *data;
    uint64_t end = 0;
    if (b->kind() == plan::BufferKind::Param) {
      data = parameters_[b->param()].weight.data;
    } else if (options.separateBuffers) {
      data = backend_.allocate(b->bytes());
      allocations_.push_back(data);
    } else {
      data = arena + b->offset();
      end = b->offset() + b->bytes();
    }
    views_.push_back(viewOf(*b->shape(), b->dtype(), data));
    arenaEnd_.push_back(end);
  }
  zeroGradients();
  return Status::success();
}

int64_t Executor::tokensPerMicroBatch() const { return views_[program_.tokens()].numel(); }

Status Executor::initParameters(uint64_t seed) {
  for (Parameter &p : parameters_)
    backend_.initParameter(p.weight, *p.spec, seed, 0);
  return Status::success();
}

void Executor::zeroGradients() {
  for (Parameter &p : parameters_)
    backend_.setZero(p.grad.data, p.bytes);
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
                                 const StepContext &context, double &loss) {
  if (Status s = setInput(program_.tokens(), tokens); !s.ok())
    return s;
  if (Status s = setInput(program_.targets(), targets); !s.ok())
    return s;
  TensorView in[8], out[8];
  const auto &instructions = *program_.instructions();
  for (flatbuffers::uoffset_t i = 0; i < instructions.size(); ++i) {
    const plan::Instruction &inst = *instructions.Get(i);
    int n = 0;
    for (uint32_t id : *inst.inputs()) {
      in[n++] = views_[id];
      highWater_ = std::max(highWater_, arenaEnd_[id]);
    }
    n = 0;
    for (uint32_t id : *inst.outputs()) {
      out[n++] = views_[id];
      highWater_ = std::max(highWater_, arenaEnd_[id]);
    }
    if (inst.opcode() == plan::Opcode::ParamGrad)
      out[0] = parameters_[inst.param()].grad;
    if (Status s = backend_.run(inst, in, out, context); !s.ok())
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
