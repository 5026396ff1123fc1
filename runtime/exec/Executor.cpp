#include "exec/Executor.h"
#include "core/Shares.h"
#include "plan/Opcodes.h"

#include <algorithm>
#include <cstdio>
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

bool writes(const plan::Instruction &inst, uint32_t buffer) {
  const auto &outputs = *inst.outputs();
  return std::find(outputs.begin(), outputs.end(), buffer) != outputs.end();
}

} // namespace

// The backend's waits for its queue are watched as the communicator's own are: under
// NCCL, a collective that hangs does so inside the device's queue.
Executor::Executor(const plan::Plan &plan, Backend &backend, Comm &comm)
    : plan_(plan), backend_(backend), comm_(comm) {
  backend.setWaitWatch(
      [&comm](const std::string &what, double waited) { comm.watch(what, waited); });
}

Executor::~Executor() { backend_.setWaitWatch({}); }

Status Executor::create(const LoadedPlan &loaded, Backend &backend, Comm &comm,
                        ExecutorOptions options, std::unique_ptr<Executor> &out) {
  std::unique_ptr<Executor> executor(new Executor(loaded.plan(), backend, comm));
  if (Status s = executor->bind(options); !s.ok())
    return Status::failure(cat("binding plan '", loaded.plan().model()->str(), "': ",
                               s.message()));
  out = std::move(executor);
  return Status::success();
}

Status Executor::allocate(size_t bytes, void *&data) {
  DeviceMemory memory;
  MT_TRY(memory.allocate(backend_, bytes));
  data = memory.data();
  allocations_.push_back(std::move(memory));
  return Status::success();
}

FlatLayout flatLayout(const plan::Plan &plan, int stage) {
  const bool pipelined = plan.grid()->pp() > 1;
  std::vector<std::vector<int>> holders(plan.params()->size());
  for (const plan::Program *prog : *plan.programs())
    for (const plan::Buffer *b : *prog->buffers())
      if (b->kind() == plan::BufferKind::Param) {
        std::vector<int> &h = holders[b->param()];
        if (std::find(h.begin(), h.end(), prog->stage()) == h.end())
          h.push_back(prog->stage());
      }
  for (std::vector<int> &h : holders)
    std::sort(h.begin(), h.end());
  FlatLayout layout;
  layout.parts = dataParts(plan);
  layout.ep = plan.grid()->ep();
  // The rest, then (expert parallelism) the experts: the pass of `experts` places those.
  for (bool experts : {false, true}) {
    if (experts && layout.ep == 1)
      break;
    int64_t at = experts ? layout.experts : 0;
    for (flatbuffers::uoffset_t i = 0; i < plan.params()->size(); ++i) {
      if ((layout.ep > 1 && plan.params()->Get(i)->expert_parallel() != experts) ||
          (pipelined && std::find(holders[i].begin(), holders[i].end(), stage) == holders[i].end()))
        continue;
      int64_t numel = 1;
      for (int64_t d : *plan.params()->Get(i)->shape())
        numel *= d;
      layout.slots.push_back({static_cast<int32_t>(i), at, numel, holders[i]});
      at += numel;
    }
    if (experts)
      layout.total = layout.experts + paddedToShares(at - layout.experts, layout.parts / layout.ep);
    else
      layout.experts = layout.total = paddedToShares(at, layout.parts);
  }
  return layout;
}

FlatShare FlatLayout::shareOf(int dataRank) const {
  FlatShare share;
  const int64_t rest = experts / parts;
  share.runs.push_back({dataRank * rest, (dataRank + 1) * rest});
  if (total > experts) {
    const int64_t mine = (total - experts) / (parts / ep), at = experts + dataRank / ep * mine;
    share.runs.push_back({at, at + mine});
  }
  return share;
}

int64_t FlatShare::numel() const {
  int64_t n = 0;
  for (const Run &r : runs)
    n += r.end - r.begin;
  return n;
}

int64_t FlatShare::local(int64_t at) const {
  int64_t before = 0;
  for (const Run &r : runs) {
    if (at >= r.begin && at < r.end)
      return before + at - r.begin;
    before += r.end - r.begin;
  }
  return -1; // not held: the callers ask only for elements a run holds
}

/// Where backward starts: the loss seed (the first Fill), before the fused loss
/// (CrossEntropyWithGrad), which is counted with the gradients it mostly computes; the
/// instructions' count where the program has none.
static uint32_t backwardBegins(const plan::Program &prog) {
  const auto &instructions = *prog.instructions();
  for (flatbuffers::uoffset_t i = 0; i < instructions.size(); ++i)
    if (instructions.Get(i)->opcode() == plan::Opcode::Fill)
      return i;
  return instructions.size();
}

Status Executor::bind(ExecutorOptions options) {
  // This rank runs its pipeline stage's programs (all of them without a pipeline), and
  // holds the parameters they name.
  const auto &programs = *plan_.programs();
  const int stage = comm_.rank(Group::Pipeline);
  const bool pipelined = plan_.grid()->pp() > 1;
  localParam_.assign(plan_.params()->size(), -1);
  // Weights and gradients: two flat stores, each parameter a contiguous slice, so that
  // gradient buckets and optimizer shards are plain ranges.
  layout_ = mt::flatLayout(plan_, stage);
  for (const FlatLayout::Slot &slot : layout_.slots) {
    const plan::Param *p = plan_.params()->Get(slot.index);
    Parameter param;
    param.spec = p;
    param.index = slot.index;
    param.name = p->name()->str();
    param.offset = slot.offset;
    param.numel = slot.numel;
    param.bytes = dtypeBytes(p->dtype()) * param.numel;
    param.holders = slot.holders;
    localParam_[slot.index] = static_cast<int>(parameters_.size());
    parameters_.push_back(param);
  }
  const int64_t total = layout_.total;
  // Weights and gradients in the accumulator type (f32 under bf16 and f16: the master
  // weights); the programs read a compute copy in the plan's precision when it differs.
  // With the distributed optimizer, mixed precision keeps only this rank's share of the
  // master weights.
  const plan::DType master = accumulatorType(plan_.precision());
  const bool mixed = plan_.precision() != master;
  const bool shardMaster = mixed && plan_.distributed_optimizer() && layout_.parts > 1;
  masterShare_ = shardMaster ? layout_.shareOf(comm_.rank(Group::Data)) : layout_.whole();
  const int64_t share = masterShare_.numel();
  std::vector<TensorView *> flats = {&flatWeights_, &flatGrads_};
  if (mixed)
    flats.push_back(&flatCompute_);
  for (TensorView *flat : flats) {
    flat->dtype = flat == &flatCompute_ ? plan_.precision() : master;
    flat->rank = 1;
    flat->shape[0] = flat == &flatWeights_ && shardMaster ? share : total;
    const size_t bytes = dtypeBytes(flat->dtype) * flat->shape[0];
    MT_TRY(allocate(bytes, flat->data));
    MT_TRY(backend_.setZero(flat->data, bytes));
  }
  for (Parameter &p : parameters_) {
    const size_t at = dtypeBytes(master) * p.offset;
    p.weight = viewOf(*p.spec->shape(), master,
                      shardMaster ? nullptr : static_cast<std::byte *>(flatWeights_.data) + at);
    p.grad = viewOf(*p.spec->shape(), master, static_cast<std::byte *>(flatGrads_.data) + at);
  }

  // One arena: the stage's programs run one at a time.
  for (const plan::Program *prog : programs)
    if (!pipelined || prog->stage() == stage)
      arenaBytes_ = std::max<uint64_t>(arenaBytes_, prog->arena_bytes());
  if (!options.separateBuffers) {
    // The arena is followed by a guard region; both start out holding a sentinel, so
    // that the bytes the programs actually write can be measured (arenaBytesWritten).
    MT_TRY(allocate(arenaBytes_ + kGuardBytes, arena_));
    MT_TRY(fillArena(kSentinel));
  }
  MT_TRY(bindRing(stage));
  views_.resize(programs.size());
  stretches_.resize(programs.size());
  backwardAt_.resize(programs.size());
  const bool recording = options.recordPrograms && backend_.records();
  for (flatbuffers::uoffset_t i = 0; i < programs.size(); ++i) {
    const plan::Program &prog = *programs.Get(i);
    if (pipelined && prog.stage() != stage)
      continue;
    backwardAt_[i] = backwardBegins(prog);
    for (flatbuffers::uoffset_t j = 0; j < prog.instructions()->size(); ++j) {
      const plan::Instruction &inst = *prog.instructions()->Get(j);
      if (Status s = backend_.supports(inst); !s.ok())
        return failedAt(i, j, s);
      if (opcodeInfo(inst.opcode()).runsOn == RunsOn::Comm)
        continue;
      if (!recording || !backend_.recordable(inst))
        continue;
      // One stretch per run of consecutive instructions the backend may record.
      std::vector<Stretch> &stretches = stretches_[i];
      if (stretches.empty() || stretches.back().end != j)
        stretches.emplace_back().begin = j;
      stretches.back().end = j + 1;
    }
    for (const plan::Buffer *b : *prog.buffers()) {
      void *data;
      if (b->kind() == plan::BufferKind::Param) {
        const Parameter &p = parameters_[localParam_[b->param()]];
        data = flatCompute_.data ? static_cast<std::byte *>(flatCompute_.data) +
                                       dtypeBytes(flatCompute_.dtype) * p.offset
                                 : p.weight.data;
      } else if (b->kind() == plan::BufferKind::Grad) {
        data = parameters_[localParam_[b->param()]].grad.data;
      } else if (options.separateBuffers) {
        MT_TRY(allocate(b->bytes(), data));
      } else {
        data = static_cast<std::byte *>(arena_) + b->offset();
      }
      views_[i].push_back(viewOf(*b->shape(), b->dtype(), data));
    }
  }
  // Under a pipeline, the stashes of the micro-batches in flight wait on the device, in
  // what mtc planned for them (the stage's stash_bytes, which the plan reader checked):
  // slots of the stage's largest stash, one per micro-batch the schedule keeps in flight.
  if (pipelined) {
    for (flatbuffers::uoffset_t i = 0; i < programs.size(); ++i)
      if (programs.Get(i)->stage() == stage && !programs.Get(i)->backward())
        stashSlotBytes_ = std::max(stashSlotBytes_, stashBytes(i));
    if (stashSlotBytes_ > 0) {
      const uint64_t planned = plan_.stages()->Get(stage)->stash_bytes();
      stashSlots_ = static_cast<int>(planned / stashSlotBytes_);
      MT_TRY(allocate(planned, stashes_));
    }
  }
  return Status::success();
}

uint64_t Executor::stashBytes(uint32_t program) const {
  const plan::Program &prog = *plan_.programs()->Get(program);
  uint64_t bytes = 0;
  for (uint32_t id : *prog.stash())
    bytes += views_[program][id].bytes();
  return bytes;
}

Status Executor::fillArena(uint8_t sentinel) {
  return arena_ ? backend_.setBytes(arena_, sentinel, arenaBytes_ + kGuardBytes)
                : Status::success();
}

Status Executor::arenaBytesWritten(uint8_t sentinel, uint64_t &written) {
  written = 0;
  return arena_ ? backend_.extentNot(arena_, sentinel, arenaBytes_ + kGuardBytes, written)
                : Status::success();
}

int64_t Executor::tokensPerMicroBatch() const {
  return plan_.micro_batch_size() * plan_.seq_length();
}

TensorView Executor::masterSlice(int64_t begin, int64_t end) const {
  const int64_t at = masterShare_.local(begin);
  return sliceOf(flatWeights_, dtypeBytes(flatWeights_.dtype), at, at + end - begin);
}

Status Executor::refreshComputeWeights() {
  if (!flatCompute_.data || masterSharded())
    return Status::success();
  return backend_.convert(flatCompute_, flatWeights_);
}

Status Executor::initParameters(uint64_t seed) {
  const int tpRank = comm_.rank(Group::Tensor), tpSize = comm_.size(Group::Tensor);
  if (!masterSharded()) {
    // An expert's weight is its expert rank's block (of the expert-parallel group).
    for (Parameter &p : parameters_)
      MT_TRY(p.spec->expert_parallel()
                 ? backend_.initParameter(p.weight, *p.spec, seed, comm_.rank(Group::Expert),
                                          comm_.size(Group::Expert))
                 : backend_.initParameter(p.weight, *p.spec, seed, tpRank, tpSize));
    return refreshComputeWeights();
  }
  // Each parameter in full, once, where its gradient will be (the gradient store holds
  // every parameter in the master type, and is zeroed afterwards): this rank's share into
  // the master weights, all of it into the compute copy.
  const size_t element = dtypeBytes(flatWeights_.dtype);
  for (Parameter &p : parameters_) {
    const TensorView &whole = p.grad;
    MT_TRY(p.spec->expert_parallel()
               ? backend_.initParameter(whole, *p.spec, seed, comm_.rank(Group::Expert),
                                        comm_.size(Group::Expert))
               : backend_.initParameter(whole, *p.spec, seed, tpRank, tpSize));
    Status converted = Status::success();
    masterShare_.forEachIn(p.offset, p.offset + p.numel, [&](int64_t begin, int64_t end) {
      if (converted.ok())
        converted = backend_.convert(masterSlice(begin, end),
                                     sliceOf(whole, element, begin - p.offset, end - p.offset));
    });
    MT_TRY(converted);
    MT_TRY(backend_.convert(sliceOf(flatCompute_, dtypeBytes(flatCompute_.dtype), p.offset,
                                    p.offset + p.numel),
                            sliceOf(whole, element, 0, p.numel)));
  }
  return zeroGradients();
}

Status Executor::zeroGradients() { return backend_.setZero(flatGrads_.data, flatGrads_.bytes()); }

Status Executor::runKernel(const plan::Instruction &inst, const TensorView *in,
                           const TensorView *out, const StepContext &context) {
  callers_.push_back(running_);
  return backend_.run(inst, in, out, context);
}

Status Executor::runCollective(const plan::Instruction &inst, const TensorView *in,
                               const TensorView *out, const StepContext &context) {
  const Group group = inst.group() == plan::CommGroup::Context ? Group::Context : Group::Tensor;
  switch (inst.opcode()) {
  case plan::Opcode::AllReduce:
    return comm_.allReduceSum(group, in[0], out[0]);
  case plan::Opcode::AllGather:
    return comm_.allGather(group, in[0], out[0], inst.axis());
  case plan::Opcode::ReduceScatter:
    return comm_.reduceScatter(group, in[0], out[0], inst.axis());
  case plan::Opcode::RingAttention:
  case plan::Opcode::RingAttentionGrad:
    return runRing(inst, in, out, context);
  case plan::Opcode::MoeExchange:
  case plan::Opcode::MoeExchangeBack:
    return runExchange(inst, in, out);
  default:
    return Status::failure("not a collective of the opcode table");
  }
}

Status Executor::bindRing(int stage) {
  uint64_t ring = 0;
  for (const plan::Program *prog : *plan_.programs())
    if (plan_.grid()->pp() == 1 || prog->stage() == stage)
      ring = std::max(ring, ringBytes(*prog));
  if (ring == 0)
    return Status::success();
  MT_TRY(allocate(ring, ring_));
  flatbuffers::FlatBufferBuilder fbb;
  const std::vector<uint32_t> operands = {0, 1}, result = {0};
  fbb.Finish(plan::CreateInstructionDirect(fbb, plan::Opcode::Add, &operands, &result));
  addInstruction_.assign(fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize());
  return Status::success();
}

Status Executor::runRing(const plan::Instruction &inst, const TensorView *in, const TensorView *out,
                         const StepContext &context) {
  const bool forward = inst.opcode() == plan::Opcode::RingAttention;
  const int cp = comm_.size(Group::Context), me = comm_.rank(Group::Context);
  const int next = (me + 1) % cp, prev = (me + cp - 1) % cp;
  const TensorView &qkv = forward ? in[0] : in[1];
  const size_t bytes = qkv.bytes();
  // The shares in flight, two of each: keys and values, and backward their gradients.
  TensorView kv[2] = {qkv, qkv}, dkv[2] = {qkv, qkv};
  for (int i = 0; i < 2; ++i) {
    kv[i].data = static_cast<std::byte *>(ring_) + i * bytes;
    dkv[i].data = static_cast<std::byte *>(ring_) + (2 + i) * bytes;
  }
  MT_TRY(backend_.copyOnDevice(kv[0].data, qkv.data, bytes));
  if (!forward) {
    MT_TRY(backend_.setZero(out[0].data, out[0].bytes()));
    MT_TRY(backend_.setZero(dkv[0].data, bytes));
  }
  // Step i holds the share of context rank me − i: it goes on to the next rank as the
  // next share arrives, before the step's compute (on a GPU, queued before it on the
  // collectives' stream); backward, that share's gradient goes along with it after the
  // compute, and after the last step it reaches home.
  constexpr int kShareTag = 1, kGradientTag = 2;
  StepContext step = context;
  int at = 0;
  for (int i = 0; i < cp; ++i) {
    step.ringOwner = (me - i + cp) % cp;
    step.ringFirst = i == 0;
    if (i + 1 < cp)
      MT_TRY(
          comm_.shift(Group::Context, next, kv[at].data, prev, kv[1 - at].data, bytes, kShareTag));
    if (forward) {
      const TensorView operands[2] = {qkv, kv[at]};
      MT_TRY(runKernel(inst, operands, out, step));
    } else {
      const TensorView operands[5] = {in[0], in[1], in[2], in[3], kv[at]};
      const TensorView results[2] = {out[0], dkv[at]};
      MT_TRY(runKernel(inst, operands, results, step));
      MT_TRY(comm_.shift(Group::Context, next, dkv[at].data, prev, dkv[1 - at].data, bytes,
                         kGradientTag));
    }
    at = 1 - at;
  }
  // On the host the sends are copies, completed with the pipeline's at the gradient
  // synchronisation: waiting for them here would wait for a pipeline neighbour's receive
  // too, which its schedule may put after a ring of its own.
  if (forward)
    return Status::success();
  // dqkv holds the queries' gradients; the share's keys' and values' ones come home.
  const TensorView sum[2] = {out[0], dkv[at]};
  return runKernel(*flatbuffers::GetRoot<plan::Instruction>(addInstruction_.data()), sum, out,
                   context);
}

/// The elements of an index tensor (expert counts), read to the host.
Status readIndex(Backend &backend, const TensorView &t, std::vector<int64_t> &values) {
  std::vector<char> raw(t.bytes());
  MT_TRY(backend.copyToHost(raw.data(), t.data, raw.size()));
  TensorView host = t;
  host.data = raw.data();
  values.resize(t.numel());
  for (int64_t i = 0; i < t.numel(); ++i)
    values[i] = host.index(i);
  return Status::success();
}

Status Executor::runExchange(const plan::Instruction &inst, const TensorView *in,
                             const TensorView *out) {
  const bool forward = inst.opcode() == plan::Opcode::MoeExchange;
  const int ep = comm_.size(Group::Expert);
  const TensorView &counts = in[1], &routing = forward ? out[1] : in[2];
  const TensorView &mine = forward ? in[0] : out[0], &all = forward ? out[0] : in[0];
  const int64_t local = counts.numel() / ep;
  if (forward) { // the counts first: every rank's rows for each rank's experts
    const std::vector<size_t> block(ep, dtypeBytes(counts.dtype) * local);
    MT_TRY(comm_.allToAll(Group::Expert, counts.data, block, routing.data, block));
  }
  std::vector<int64_t> sent, from; // rows per expert of this rank; [source, local expert]
  MT_TRY(readIndex(backend_, counts, sent));
  MT_TRY(readIndex(backend_, routing, from));
  // Rows to each peer (its experts' of this rank's), and from each source.
  const size_t row = dtypeBytes(mine.dtype) * mine.dim(1);
  std::vector<size_t> toPeer(ep, 0), fromPeer(ep, 0);
  std::vector<int64_t> expertRows(local, 0);
  for (int64_t i = 0; i < ep * local; ++i) {
    if (sent[i] < 0 || from[i] < 0 || sent[i] > mine.dim(0) || from[i] > mine.dim(0))
      return Status::failure(
          cat("an expert exchange of ", sent[i], " and ", from[i], " rows, of ", mine.dim(0)));
    toPeer[i / local] += row * sent[i];
    fromPeer[i / local] += row * from[i];
    expertRows[i % local] += from[i];
  }
  size_t sentBytes = 0, receivedBytes = 0;
  for (int p = 0; p < ep; ++p)
    sentBytes += toPeer[p], receivedBytes += fromPeer[p];
  if (sentBytes > mine.bytes() || receivedBytes > all.bytes())
    return Status::failure("an expert exchange of more rows than its buffers hold");
  // Source-major (s, e) in the staging buffer <-> expert-major (e, s) in `all`.
  auto reorder = [&](bool toExperts) -> Status {
    std::vector<size_t> at(ep * local), to(ep * local);
    size_t a = 0;
    for (int64_t i = 0; i < ep * local; a += row * from[i++])
      at[i] = a;
    size_t t = 0;
    for (int64_t e = 0; e < local; ++e)
      for (int64_t s = 0; s < ep; t += row * from[s * local + e], ++s)
        to[s * local + e] = t;
    for (int64_t i = 0; i < ep * local; ++i) {
      std::byte *staged = static_cast<std::byte *>(ring_) + at[i];
      std::byte *placed = static_cast<std::byte *>(all.data) + to[i];
      MT_TRY(backend_.copyOnDevice(toExperts ? placed : staged, toExperts ? staged : placed,
                                   row * from[i]));
    }
    return Status::success();
  };
  if (forward) {
    MT_TRY(comm_.allToAll(Group::Expert, mine.data, toPeer, ring_, fromPeer));
    MT_TRY(reorder(true));
    // Past the rows that came, zeros (the experts' GEMMs leave them so too).
    return backend_.setZero(static_cast<std::byte *>(all.data) + receivedBytes,
                            all.bytes() - receivedBytes);
  }
  MT_TRY(reorder(false));
  MT_TRY(backend_.setZero(mine.data, mine.bytes()));
  return comm_.allToAll(Group::Expert, ring_, fromPeer, mine.data, toPeer);
}

uint64_t ringBytes(const plan::Program &prog) {
  uint64_t most = 0;
  for (const plan::Instruction *inst : *prog.instructions()) {
    // An expert exchange stages the whole group's rows.
    if (inst->opcode() == plan::Opcode::MoeExchange ||
        inst->opcode() == plan::Opcode::MoeExchangeBack) {
      const bool forward = inst->opcode() == plan::Opcode::MoeExchange;
      const uint32_t id = forward ? inst->outputs()->Get(0) : inst->inputs()->Get(0);
      most = std::max(most, prog.buffers()->Get(id)->bytes());
    }
    const bool forward = inst->opcode() == plan::Opcode::RingAttention;
    if (forward || inst->opcode() == plan::Opcode::RingAttentionGrad) {
      const uint64_t share = prog.buffers()->Get(inst->inputs()->Get(forward ? 0 : 1))->bytes();
      most = std::max(most, (forward ? 2 : 4) * share);
    }
  }
  return most;
}

Status Executor::setInput(const TensorView &view, const int32_t *ids) {
  // `ids` is the micro-batch [B, S]; a context-parallel rank takes its share of each
  // sequence (core/Tensor.h: SequenceMap), as Megatron's batch is cut for it.
  const int cpRank = comm_.rank(Group::Context), cpSize = comm_.size(Group::Context);
  std::vector<int32_t> share;
  if (cpSize > 1) {
    const int64_t rows = view.dim(1), whole = rows * cpSize;
    const SequenceMap positions(rows, 0, 1, cpRank, cpSize);
    share.resize(view.numel());
    for (int64_t b = 0; b < view.dim(0); ++b)
      for (int64_t t = 0; t < rows; ++t)
        share[b * rows + t] = ids[b * whole + positions(t)];
    ids = share.data();
  }
  if (view.dtype == plan::DType::I32)
    return backend_.copyToDevice(view.data, ids, sizeof(int32_t) * view.numel());
  if (view.dtype == plan::DType::I64) {
    std::vector<int64_t> wide(ids, ids + view.numel());
    return backend_.copyToDevice(view.data, wide.data(), sizeof(int64_t) * wide.size());
  }
  return Status::failure("plan inputs must be i32 or i64 tensors");
}

Status Executor::failedAt(uint32_t program, uint32_t index, const Status &cause) const {
  const plan::Program &prog = *plan_.programs()->Get(program);
  return Status::failure(
      cat(prog.name()->str(), " instruction ", index, " (",
          plan::EnumNameOpcode(prog.instructions()->Get(index)->opcode()), "): ", cause.message()));
}

Status Executor::run(uint32_t program, const int32_t *tokens, const int32_t *targets,
                     StepContext context) {
  const plan::Program &prog = *plan_.programs()->Get(program);
  const std::vector<TensorView> &views = views_[program];
  context.tpRank = comm_.rank(Group::Tensor);
  context.tpSize = comm_.size(Group::Tensor);
  context.cpRank = comm_.rank(Group::Context);
  context.cpSize = comm_.size(Group::Context);
  size_t call = 0;
  (void)backend_.checkRuns(call); // whatever a failed run before left unread
  callers_.clear();
  MT_TRY(setInput(views[prog.tokens()], tokens));
  MT_TRY(setInput(views[prog.targets()], targets));
  std::vector<Profile::Entry *> timed;
  Status ran = Status::success();
  // An evaluation is neither timed nor recorded: it is not the step's work.
  const bool timing = profile_ && context.training;
  if (timing) {
    profile_->forget(); // whatever a failed run before left
    MT_TRY(profile_->mark());
    ran = runInstructions(program, context, &timed);
  } else if (context.training) {
    ran = runStretches(program, context);
  } else {
    ran = runInstructions(program, context, nullptr);
  }
  // What the backend found wrong with the data came first, if anything: a bad id
  // before the failure it may have caused.
  if (Status s = backend_.checkRuns(call); !s.ok())
    return call < callers_.size() ? failedAt(program, callers_[call], s) : s;
  MT_TRY(ran);
  return timing ? profile_->record(timed) : Status::success();
}

Status Executor::runInstructions(uint32_t program, const StepContext &context,
                                 std::vector<Profile::Entry *> *timed, uint32_t begin,
                                 uint32_t end) {
  const plan::Program &prog = *plan_.programs()->Get(program);
  const std::vector<TensorView> &views = views_[program];
  TensorView in[8], out[8];
  StepContext here = context;
  here.program = program;
  const auto &instructions = *prog.instructions();
  end = std::min<uint32_t>(end, instructions.size());
  // An evaluation ends with the instruction that completes the loss.
  if (!context.training && prog.loss() >= 0) {
    while (end > 0 && !writes(*instructions.Get(end - 1), static_cast<uint32_t>(prog.loss())))
      --end;
  }
  for (uint32_t i = begin; i < end; ++i) {
    const plan::Instruction &inst = *instructions.Get(i);
    if (i == backwardAt_[program])
      backwardStart_ = std::chrono::steady_clock::now();
    int n = 0;
    for (uint32_t id : *inst.inputs())
      in[n++] = views[id];
    n = 0;
    for (uint32_t id : *inst.outputs())
      out[n++] = views[id];
    running_ = i;
    here.instruction = i;
    if (Status s = opcodeInfo(inst.opcode()).runsOn == RunsOn::Comm
                       ? runCollective(inst, in, out, here)
                       : runKernel(inst, in, out, here);
        !s.ok())
      return failedAt(program, i, s);
    if (timed) {
      MT_TRY(profile_->mark());
      timed->push_back(&profileEntry(program, i, inst, in[0], out[0]));
    }
  }
  return Status::success();
}

Executor::Recordings Executor::recordings() const {
  Recordings count;
  for (const std::vector<Stretch> &stretches : stretches_) {
    const auto recorded = std::count_if(stretches.begin(), stretches.end(),
                                        [](const Stretch &s) { return s.recording != nullptr; });
    count.programs += recorded > 0;
    count.stretches += static_cast<int>(recorded);
  }
  return count;
}

Status Executor::runStretches(uint32_t program, const StepContext &context) {
  uint32_t next = 0;
  for (Stretch &stretch : stretches_[program]) {
    // What runs between the stretches: collectives, and kernels no recording may hold.
    MT_TRY(runInstructions(program, context, nullptr, next, stretch.begin));
    MT_TRY(runStretch(program, stretch, context));
    next = stretch.end;
  }
  return runInstructions(program, context, nullptr, next);
}

Status Executor::runStretch(uint32_t program, Stretch &stretch, const StepContext &context) {
  const plan::Program &prog = *plan_.programs()->Get(program);
  // A stretch is recorded on its second run: the first, instruction by instruction, has
  // sized the backend's temporaries and chosen its kernels, which a recording must not
  // change. A recording whose memory has moved since is made again.
  constexpr int kAttempts = 3;
  if (!stretch.recording && stretch.runs++ > 0 && stretch.failures < kAttempts) {
    std::string why;
    const size_t calls = callers_.size(); // a recording runs nothing yet
    stretch.recording = backend_.record(
        [&] { return runInstructions(program, context, nullptr, stretch.begin, stretch.end); },
        why);
    callers_.resize(calls);
    if (stretch.recording)
      stretch.failures = 0;
    else if (++stretch.failures == kAttempts)
      std::fprintf(stderr,
                   "mtrun: %s runs instructions %u to %u one by one: recording them "
                   "failed %d times, last: %s\n",
                   prog.name()->c_str(), stretch.begin, stretch.end - 1, kAttempts, why.c_str());
  }
  if (stretch.recording) {
    if (stretch.begin <= backwardAt_[program] && backwardAt_[program] < stretch.end)
      backwardStart_ = std::chrono::steady_clock::now();
    bool stale = false;
    if (Status s = stretch.recording->replay(context, stale); !s.ok())
      return Status::failure(cat(prog.name()->str(), " (recorded): ", s.message()));
    if (!stale) {
      for (uint32_t i = stretch.begin; i < stretch.end; ++i)
        callers_.push_back(i);
      return Status::success();
    }
    stretch.recording.reset();
  }
  return runInstructions(program, context, nullptr, stretch.begin, stretch.end);
}

Profile::Entry &Executor::profileEntry(uint32_t program, uint32_t index,
                                       const plan::Instruction &inst, const TensorView &in,
                                       const TensorView &out) {
  if (Profile::Entry *known = profile_->find(program, index))
    return *known;
  const plan::Program &prog = *plan_.programs()->Get(program);
  std::string shape;
  if (inst.outputs()->size() > 0) {
    shape = "[";
    for (int d = 0; d < out.rank; ++d)
      shape += (d ? "," : "") + std::to_string(out.shape[d]);
    shape += "]";
  }
  Profile::Entry &e = profile_->instruction(program, index, plan::EnumNameOpcode(inst.opcode()),
                                            cat(prog.name()->str(), " #", index), shape);
  // The matrix products' FLOPs, 2·m·n·k each: a linear's from its first operand (x or
  // dy) and its result; fused attention's from its output (or the output's gradient, its
  // first operand) o [b, rows, heads·d] over the s keys of its qkv (its first operand, or
  // its gradient's result; under context parallelism the rows are a share of them): QKᵀ
  // and P·V, 4·b·rows·s·heads·d forward, of which the mask's share of the whole sequence
  // (AttentionMask::share: half under a causal mask, the masked part skipped), 2.5 times
  // that backward (S again, dV, dP, dQ and dK). A ring step's keys are one share of the
  // cp, of which it computes the mask's share on average.
  const double result = static_cast<double>(out.numel());
  auto attention = [&](const TensorView &o, int64_t keys, int64_t whole) {
    return 4.0 * attentionMaskOf(inst).share(whole) * static_cast<double>(o.numel()) *
           static_cast<double>(keys);
  };
  const int64_t cp = inst.context_parallel();
  switch (inst.opcode()) {
  case plan::Opcode::Linear:                 // y [m, n] = x [m, k]·Wᵀ
  case plan::Opcode::LinearGelu:             // the same, GELU in its epilogue
  case plan::Opcode::LinearGradInput:        // dx [m, k] = dy [m, n]·W
  case plan::Opcode::LinearGradInputGelu:    // the same, GELU's gradient in its epilogue
  case plan::Opcode::GroupedLinear:          // each expert's rows: as Linear, all rows
  case plan::Opcode::GroupedLinearGradInput: // as LinearGradInput
    e.flops = 2 * result * static_cast<double>(in.cols());
    break;
  case plan::Opcode::LinearGradWeight:        // dW [n, k] = dyᵀ [n, m]·x [m, k]
  case plan::Opcode::LinearGradWeightBias:    // the same, db summed in its epilogue
  case plan::Opcode::GroupedLinearGradWeight: // dW [E, n, k]: the experts' over all m rows
    e.flops = 2 * result * static_cast<double>(in.rows()) /
              (inst.opcode() == plan::Opcode::GroupedLinearGradWeight ? out.dim(0) : 1);
    break;
  case plan::Opcode::Attention:
    e.flops = attention(out, in.dim(1), in.dim(1));
    break;
  case plan::Opcode::AttentionGrad:
    e.flops = 2.5 * attention(in, out.dim(1), out.dim(1));
    break;
  case plan::Opcode::RingAttention:
    e.flops = attention(out, in.dim(1), in.dim(1) * cp);
    break;
  case plan::Opcode::RingAttentionGrad:
    e.flops = 2.5 * attention(in, out.dim(1), out.dim(1) * cp);
    break;
  default:
    break;
  }
  return e;
}

namespace {

Status readScalar(Backend &backend, const TensorView &view, double &value) {
  if (view.dtype == plan::DType::F64)
    return backend.copyToHost(&value, view.data, sizeof(double));
  float single;
  MT_TRY(backend.copyToHost(&single, view.data, sizeof(float)));
  value = single;
  return Status::success();
}

} // namespace

Status Executor::forwardBackward(const int32_t *tokens, const int32_t *targets,
                                 StepContext context, double &loss) {
  MT_TRY(run(0, tokens, targets, context));
  return readScalar(backend_, views_[0][plan_.programs()->Get(0)->loss()], loss);
}

size_t Executor::receiveBytes(uint32_t program) const {
  const plan::Program &prog = *plan_.programs()->Get(program);
  return prog.recv() >= 0 ? views_[program][prog.recv()].bytes() : 0;
}

Status Executor::runPiece(uint32_t program, const int32_t *tokens, const int32_t *targets,
                          StepContext context, const std::vector<char> *received, int slot,
                          std::vector<char> &sent, double &loss) {
  const plan::Program &prog = *plan_.programs()->Get(program);
  const std::vector<TensorView> &views = views_[program];
  if (prog.recv() >= 0) {
    const TensorView &in = views[prog.recv()];
    if (!received || received->size() != in.bytes())
      return Status::failure(cat(prog.name()->str(), ": received ",
                                 received ? received->size() : 0, " bytes, expected ",
                                 in.bytes()));
    MT_TRY(backend_.copyToDevice(in.data, received->data(), received->size()));
  }
  // The stashed tensors, one after another in the slot: a forward writes them there, its
  // backward reads them back into its own buffers.
  const auto &stashIds = *prog.stash();
  // An evaluation has no backward to stash for.
  const bool stashes = stashIds.size() > 0 && context.training;
  if (stashes && (slot < 0 || slot >= stashSlots_))
    return Status::failure(cat(prog.name()->str(), ": no stash slot ", slot, " (of ",
                               stashSlots_, ")"));
  auto stashCopy = [&](bool save) -> Status {
    if (!stashes)
      return Status::success();
    std::byte *at = static_cast<std::byte *>(stashes_) + slot * stashSlotBytes_;
    for (uint32_t id : stashIds) {
      const TensorView &v = views[id];
      MT_TRY(save ? backend_.copyOnDevice(at, v.data, v.bytes())
                  : backend_.copyOnDevice(v.data, at, v.bytes()));
      at += v.bytes();
    }
    return Status::success();
  };
  if (prog.backward())
    MT_TRY(stashCopy(false));
  MT_TRY(run(program, tokens, targets, context));
  if (!prog.backward())
    MT_TRY(stashCopy(true));
  if (prog.send() >= 0) {
    const TensorView &out = views[prog.send()];
    sent.resize(out.bytes());
    MT_TRY(backend_.copyToHost(sent.data(), out.data, sent.size()));
  }
  if (prog.loss() >= 0)
    return readScalar(backend_, views[prog.loss()], loss);
  return Status::success();
}

} // namespace mt
