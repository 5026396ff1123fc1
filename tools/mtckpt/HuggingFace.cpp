#include "HuggingFace.h"
#include "train/HfConfig.h"
#include "train/Safetensors.h"

#include "core/AtomicFile.h"
#include "core/Half.h"
#include "core/InputFile.h"
#include "train/CheckpointFiles.h"

#include <nlohmann/json.hpp>

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

namespace mt::hf {
namespace {

using json = nlohmann::json;

/// One mtc tensor and the Hugging Face tensors it is made of. `fuse`: the Hugging Face
/// tensors are the query, key and value projections (one tensor of the three stacked by
/// rows, or three), which mtc fuses by key/value group: (group, {its heads/kv query
/// heads, its key, its value}, d) rows. `transpose`: GPT-2's Conv1D weights are [in, out].
/// `vocab`: a vocabulary table, which mtc pads with rows past the vocabulary (Megatron's
/// --make-vocab-size-divisible-by); an import writes none (mtrun pads as it loads), an
/// export leaves them out. `rowsFrom` ≥ 0: the mtc tensor is that row of its one Hugging
/// Face tensor and the rows after it (Phi-3's gate_up_proj: the gate's rows, then the
/// up projection's), which an export writes whole from every mapping that slices it.
struct Mapping {
  std::string mtc;
  std::vector<int64_t> shape;
  std::vector<std::string> hf;
  std::vector<std::vector<int64_t>> hfShapes;
  bool transpose = false, fuse = false, vocab = false;
  int64_t rowsFrom = -1;
};

std::vector<Mapping> mappings(const ModelConfig &a, const std::string &prefix) {
  std::vector<Mapping> m;
  const int64_t h = a.hidden, q = a.heads * a.headDim, kv = a.kvHeads * a.headDim;
  auto copy = [&](std::string mtc, std::string hf, std::vector<int64_t> shape) {
    m.push_back({std::move(mtc), shape, {prefix + hf}, {shape}});
  };
  auto conv1d = [&](std::string mtc, std::string hf, int64_t out, int64_t in) {
    m.push_back({std::move(mtc), {out, in}, {prefix + hf}, {{in, out}}, true});
  };
  // A mixture's experts: one mtc tensor [E, ...] of the E Hugging Face ones, stacked.
  auto moe = [&](const std::string &mt, const std::string &hf) {
    const ExpertNames names = expertNames(a);
    const std::string mixture = names.prefix;
    copy(mt + mixture + "gate.weight", hf + mixture + "gate.weight", {a.experts, h});
    for (const std::string w : {names.gate, names.down, names.up}) {
      const std::vector<int64_t> one =
          w == names.down ? std::vector<int64_t>{h, a.ffn} : std::vector<int64_t>{a.ffn, h};
      Mapping stacked{mt + mixture + "experts." + w, {a.experts, one[0], one[1]}, {}, {}};
      for (int64_t e = 0; e < a.experts; ++e) {
        stacked.hf.push_back(cat(prefix, hf, mixture, "experts.", e, ".", w, ".weight"));
        stacked.hfShapes.push_back(one);
      }
      m.push_back(std::move(stacked));
    }
  };
  auto table = [&](std::string mtc, std::string hf, std::string hfPrefix) {
    m.push_back({std::move(mtc), {a.vocab, h}, {hfPrefix + hf}, {{a.vocab, h}}, false, false, true});
  };
  // Phi-3's projections in one matrix each: [q; k; v] rows, and [gate; up].
  const bool phi3 = a.architecture == "Phi3ForCausalLM";
  if (a.llama) {
    table("embed_tokens.weight", "embed_tokens.weight", prefix);
    for (int64_t l = 0; l < a.layers; ++l) {
      const std::string mt = cat("layers.", l, "."), hf = cat("layers.", l, ".");
      copy(mt + "input_layernorm.weight", hf + "input_layernorm.weight", {h});
      if (phi3)
        m.push_back({mt + "self_attn.qkv.weight",
                     {q + 2 * kv, h},
                     {prefix + hf + "self_attn.qkv_proj.weight"},
                     {{q + 2 * kv, h}},
                     false,
                     true});
      else
        m.push_back(
            {mt + "self_attn.qkv.weight",
             {q + 2 * kv, h},
             {prefix + hf + "self_attn.q_proj.weight", prefix + hf + "self_attn.k_proj.weight",
              prefix + hf + "self_attn.v_proj.weight"},
             {{q, h}, {kv, h}, {kv, h}},
             false,
             true});
      if (a.qkvBias)
        m.push_back({mt + "self_attn.qkv.bias",
                     {q + 2 * kv},
                     {prefix + hf + "self_attn.q_proj.bias", prefix + hf + "self_attn.k_proj.bias",
                      prefix + hf + "self_attn.v_proj.bias"},
                     {{q}, {kv}, {kv}},
                     false,
                     true});
      if (a.qkNorm)
        for (const char *norm : {"self_attn.q_norm.weight", "self_attn.k_norm.weight"})
          copy(mt + norm, hf + norm, {a.headDim});
      copy(mt + "self_attn.o_proj.weight", hf + "self_attn.o_proj.weight", {h, q});
      if (a.outputBias)
        copy(mt + "self_attn.o_proj.bias", hf + "self_attn.o_proj.bias", {h});
      copy(mt + "post_attention_layernorm.weight", hf + "post_attention_layernorm.weight", {h});
      if (a.experts > 0) {
        moe(mt, hf);
        continue;
      }
      if (phi3) {
        const std::string fused = prefix + hf + "mlp.gate_up_proj.weight";
        for (auto [name, from] : {std::pair{"mlp.gate_proj.weight", int64_t{0}},
                                  std::pair{"mlp.up_proj.weight", a.ffn}})
          m.push_back(
              {mt + name, {a.ffn, h}, {fused}, {{2 * a.ffn, h}}, false, false, false, from});
      } else {
        copy(mt + "mlp.gate_proj.weight", hf + "mlp.gate_proj.weight", {a.ffn, h});
        copy(mt + "mlp.up_proj.weight", hf + "mlp.up_proj.weight", {a.ffn, h});
      }
      copy(mt + "mlp.down_proj.weight", hf + "mlp.down_proj.weight", {h, a.ffn});
    }
    copy("norm.weight", "norm.weight", {h});
    if (!a.tied)
      table("lm_head.weight", "lm_head.weight", "");
    return m;
  }
  table("wte", "wte.weight", prefix);
  copy("wpe", "wpe.weight", {a.positions, h});
  for (int64_t l = 0; l < a.layers; ++l) {
    const std::string p = cat("h.", l, ".");
    for (const char *norm : {"ln_1", "ln_2"})
      for (const char *part : {".weight", ".bias"})
        copy(p + norm + part, p + norm + part, {h});
    m.push_back({p + "attn.qkv.weight", {3 * h, h}, {prefix + p + "attn.c_attn.weight"},
                 {{h, 3 * h}}, true, true});
    m.push_back({p + "attn.qkv.bias", {3 * h}, {prefix + p + "attn.c_attn.bias"}, {{3 * h}},
                 false, true});
    conv1d(p + "attn.proj.weight", p + "attn.c_proj.weight", h, h);
    copy(p + "attn.proj.bias", p + "attn.c_proj.bias", {h});
    conv1d(p + "mlp.fc.weight", p + "mlp.c_fc.weight", a.ffn, h);
    copy(p + "mlp.fc.bias", p + "mlp.c_fc.bias", {a.ffn});
    conv1d(p + "mlp.proj.weight", p + "mlp.c_proj.weight", h, a.ffn);
    copy(p + "mlp.proj.bias", p + "mlp.c_proj.bias", {h});
  }
  copy("ln_f.weight", "ln_f.weight", {h});
  copy("ln_f.bias", "ln_f.bias", {h});
  return m;
}

/// Tensors a Hugging Face checkpoint may hold that the model recomputes.
bool derivedBuffer(const std::string &name) {
  auto ends = [&](const std::string &tail) {
    return name.size() >= tail.size() && name.compare(name.size() - tail.size(), tail.size(), tail) == 0;
  };
  return ends(".attn.bias") || ends(".attn.masked_bias") || ends(".rotary_emb.inv_freq");
}

// Element conversions: the checkpoint holds f32; Hugging Face files bf16, f16 or f32.
// Widening is exact, narrowing rounds to nearest even: a round trip is bit-exact.
/// Each element of `in`, a From, as convert makes it a To.
template <typename From, typename To, typename Convert>
std::vector<char> converted(const std::vector<char> &in, Convert convert) {
  const size_t n = in.size() / sizeof(From);
  std::vector<char> out(n * sizeof(To));
  for (size_t i = 0; i < n; ++i) {
    From x;
    std::memcpy(&x, in.data() + i * sizeof(From), sizeof x);
    const To y = convert(x);
    std::memcpy(out.data() + i * sizeof(To), &y, sizeof y);
  }
  return out;
}
std::vector<char> toF32(const std::vector<char> &in, const std::string &dtype) {
  if (dtype == "F32")
    return in;
  return converted<uint16_t, float>(
      in, [&](uint16_t h) { return dtype == "BF16" ? bf16ToFloat(h) : f16ToFloat(h); });
}
std::vector<char> fromF32(const std::vector<char> &in, const std::string &dtype) {
  if (dtype == "F32")
    return in;
  return converted<float, uint16_t>(
      in, [&](float f) { return dtype == "BF16" ? floatToBf16(f) : floatToF16(f); });
}

/// [rows, cols] of 4-byte elements -> [cols, rows].
std::vector<char> transposed(const std::vector<char> &in, int64_t rows, int64_t cols) {
  std::vector<char> out(in.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      std::memcpy(out.data() + 4 * (c * rows + r), in.data() + 4 * (r * cols + c), 4);
  return out;
}

/// Query rows [heads·d], key and value rows [kv·d] each of `rowBytes`, fused by group;
/// and the inverse.
std::vector<char> fused(const std::vector<char> &qkv, const ModelConfig &a, size_t rowBytes) {
  const int64_t r = a.heads / a.kvHeads, d = a.headDim;
  const size_t block = d * rowBytes, qBytes = a.heads * block, kvBytes = a.kvHeads * block;
  std::vector<char> out;
  out.reserve(qkv.size());
  for (int64_t g = 0; g < a.kvHeads; ++g) {
    const char *q = qkv.data() + g * r * block, *k = qkv.data() + qBytes + g * block,
               *v = qkv.data() + qBytes + kvBytes + g * block;
    out.insert(out.end(), q, q + r * block);
    out.insert(out.end(), k, k + block);
    out.insert(out.end(), v, v + block);
  }
  return out;
}
std::vector<char> unfused(const std::vector<char> &grouped, const ModelConfig &a,
                          size_t rowBytes) {
  const int64_t r = a.heads / a.kvHeads, d = a.headDim;
  const size_t block = d * rowBytes, qBytes = a.heads * block, kvBytes = a.kvHeads * block;
  std::vector<char> out(grouped.size());
  for (int64_t g = 0; g < a.kvHeads; ++g) {
    const char *in = grouped.data() + g * (r + 2) * block;
    std::memcpy(out.data() + g * r * block, in, r * block);
    std::memcpy(out.data() + qBytes + g * block, in + r * block, block);
    std::memcpy(out.data() + qBytes + kvBytes + g * block, in + (r + 1) * block, block);
  }
  return out;
}

/// The bytes of a row of a mapping's mtc tensor (all of it for a vector).
size_t rowBytesOf(const Mapping &m) { return 4 * (m.shape.size() == 2 ? m.shape[1] : 1); }

/// Tensor `name` of `source` as f32 bytes.
Status readF32(const safetensors::Shards &source, const std::string &name, std::vector<char> &out) {
  std::vector<char> raw;
  MT_TRY(source.read(name, raw));
  out = toF32(raw, source.find(name)->dtype);
  return Status::success();
}

std::string shapeText(const std::vector<int64_t> &shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

} // namespace

Status importDirectory(const std::string &hfDir, const std::string &saveDir,
                       std::string &report) {
  ModelConfig a;
  MT_TRY(readModelConfig(hfDir + "/config.json", a));
  safetensors::Shards source;
  MT_TRY(safetensors::Shards::open(hfDir, source));
  // GPT-2's tensors are named with or without GPT2LMHeadModel's "transformer." prefix;
  // LLaMA's carry LlamaForCausalLM's "model.".
  const std::string prefix = a.llama ? "model."
                             : source.find("transformer.wte.weight") ? "transformer."
                                                                    : "";
  const std::vector<Mapping> maps = mappings(a, prefix);
  std::set<std::string> used;
  checkpoint::Index index;
  index.model = !a.modelType.empty() ? a.modelType : a.llama ? "llama" : "gpt2";
  index.layout = {{"imported_from", hfDir},
                  {"heads", std::to_string(a.heads)},
                  {"kv_heads", std::to_string(a.kvHeads)},
                  {"head_dim", std::to_string(a.headDim)}};
  std::map<std::string, const Mapping *> byName;
  for (const Mapping &m : maps) {
    for (size_t i = 0; i < m.hf.size(); ++i) {
      const safetensors::Tensor *t = source.find(m.hf[i]);
      if (!t)
        return Status::failure(cat(hfDir, ": tensor '", m.hf[i], "' is missing"));
      if (t->shape != m.hfShapes[i])
        return Status::failure(cat(hfDir, ": tensor '", m.hf[i], "' is ", shapeText(t->shape),
                                   ", config.json makes it ", shapeText(m.hfShapes[i])));
      if (t->dtype != "BF16" && t->dtype != "F16" && t->dtype != "F32")
        return Status::failure(cat(hfDir, ": tensor '", m.hf[i], "' is ", t->dtype,
                                   ", not BF16, F16 or F32"));
      used.insert(m.hf[i]);
    }
    index.tensors[m.mtc] = {"F32", m.shape, {}, m.vocab ? a.vocab : 0};
    byName[m.mtc] = &m;
  }
  // A tied output layer stored anyway must be the embedding, bit for bit.
  const std::string embedding = prefix + (a.llama ? "embed_tokens.weight" : "wte.weight");
  int64_t buffers = 0;
  for (const std::string &name : source.names()) {
    if (used.count(name))
      continue;
    if (derivedBuffer(name)) {
      ++buffers;
      continue;
    }
    if (a.tied && name == "lm_head.weight") {
      std::vector<char> head, embed;
      MT_TRY(source.read(name, head));
      MT_TRY(source.read(embedding, embed));
      if (head != embed)
        return Status::failure(cat(hfDir, ": lm_head.weight differs from ", embedding,
                                   ", but config.json ties them"));
      continue;
    }
    return Status::failure(cat(hfDir, ": tensor '", name, "' is not part of mtc's ", a.architecture,
                               " (nothing is dropped silently)"));
  }
  std::string written, lastRead; // the tensor sliced last, kept for its other slices
  std::vector<char> lastWhole;
  MT_TRY(checkpoint::writeWholeCheckpoint(
      saveDir, index,
      [&](const std::string &name, std::vector<char> &out) {
        const Mapping &m = *byName.at(name);
        std::vector<char> joined;
        for (const std::string &hf : m.hf) {
          std::vector<char> part;
          if (m.rowsFrom >= 0 && hf == lastRead)
            part = lastWhole;
          else
            MT_TRY(readF32(source, hf, part));
          if (m.rowsFrom >= 0)
            std::tie(lastRead, lastWhole) = std::pair{hf, part};
          if (m.transpose)
            part = transposed(part, m.hfShapes[0][0], m.hfShapes[0][1]);
          joined.insert(joined.end(), part.begin(), part.end());
        }
        if (m.rowsFrom >= 0) { // its rows of the one tensor
          const size_t row = rowBytesOf(m);
          if ((m.rowsFrom + m.shape[0]) * row > joined.size())
            return Status::failure(cat(name, ": rows past the end of ", m.hf[0]));
          joined = std::vector<char>(joined.begin() + m.rowsFrom * row,
                                     joined.begin() + (m.rowsFrom + m.shape[0]) * row);
        }
        out = m.fuse ? fused(joined, a, rowBytesOf(m)) : std::move(joined);
        return Status::success();
      },
      written));
  report = cat("wrote ", written, ": ", maps.size(), " tensors of ", a.architecture, " from ",
               used.size(), " Hugging Face tensors",
               buffers ? cat(" (", buffers, " buffers the model recomputes left out)") : "",
               "; weights only: mtrun --load starts training from them at step 0");
  return Status::success();
}

/// Mapping `m`'s Hugging Face tensors as f32 bytes, from the checkpoint `reader` reads: a
/// tensor that several mappings slice (rowsFrom) whole, from each of them.
Status hfParts(checkpoint::CheckpointReader &reader, const ModelConfig &a,
               const std::vector<Mapping> &maps, const Mapping &m,
               std::vector<std::vector<char>> &parts) {
  std::vector<char> data(safetensors::bytesOf("F32", m.shape));
  MT_TRY(reader.read(m.mtc, wholeBox(m.shape), data.data()));
  if (m.rowsFrom == 0) {
    int64_t rows = m.shape[0];
    data.resize(safetensors::bytesOf("F32", m.hfShapes[0]));
    for (const Mapping &slice : maps)
      if (slice.rowsFrom > 0 && slice.hf[0] == m.hf[0]) {
        MT_TRY(reader.read(slice.mtc, wholeBox(slice.shape),
                           data.data() + slice.rowsFrom * rowBytesOf(slice)));
        rows += slice.shape[0];
      }
    if (rows != m.hfShapes[0][0])
      return Status::failure(
          cat(m.hf[0], ": its slices hold ", rows, " of its ", m.hfShapes[0][0], " rows"));
  }
  if (m.fuse)
    data = unfused(data, a, rowBytesOf(m));
  parts.clear();
  size_t at = 0;
  for (const std::vector<int64_t> &shape : m.hfShapes) {
    const size_t n = safetensors::bytesOf("F32", shape);
    std::vector<char> part(data.begin() + at, data.begin() + at + n);
    at += n;
    if (m.transpose) // back to Conv1D's [in, out]
      part = transposed(part, shape[1], shape[0]);
    parts.push_back(std::move(part));
  }
  return Status::success();
}

/// The checkpoint holds exactly the tensors `maps` name, of the shapes config.json
/// (`config`, described by `a`) gives them (a vocabulary table may have padding rows),
/// and optimizer state (`optimizerState` tensors of it), fused as `a` says.
Status checkExportable(const checkpoint::CheckpointReader &reader, const ModelConfig &a,
                       const std::vector<Mapping> &maps, const std::string &config,
                       int64_t &optimizerState) {
  const checkpoint::Index &index = reader.index();
  // An imported checkpoint says how its QKV was fused; shapes alone cannot tell
  // 8 heads of 64 sharing 2 from 16 heads of 32 sharing 4.
  for (const auto &[key, value] : {std::pair<const char *, int64_t>{"heads", a.heads},
                                   {"kv_heads", a.kvHeads},
                                   {"head_dim", a.headDim}})
    if (index.layout.count(key) && index.layout.at(key) != std::to_string(value))
      return Status::failure(cat(reader.directory(), ": its QKV was fused with ", key, " ",
                                 index.layout.at(key), ", ", config, " says ", value));
  std::set<std::string> expected;
  for (const Mapping &m : maps) {
    auto it = index.tensors.find(m.mtc);
    if (it == index.tensors.end())
      return Status::failure(cat(reader.directory(), ": tensor '", m.mtc, "' is missing"));
    if (m.vocab && it->second.vocabRows > 0 && it->second.vocabRows != a.vocab)
      return Status::failure(cat(reader.directory(), ": tensor '", m.mtc,
                                 "' holds a vocabulary of ", it->second.vocabRows, ", ",
                                 config, " says ", a.vocab));
    if (!checkpoint::holdsTable(it->second, m.shape, m.vocab ? a.vocab : 0) ||
        it->second.dtype != "F32")
      return Status::failure(cat(reader.directory(), ": tensor '", m.mtc, "' is ",
                                 it->second.dtype, " ", shapeText(it->second.shape),
                                 ", config.json makes it F32 ", shapeText(m.shape),
                                 m.vocab ? " (or more rows: padding)" : ""));
    expected.insert(m.mtc);
  }
  optimizerState = 0;
  for (const auto &[name, t] : index.tensors)
    if (!expected.count(name)) {
      if (name.rfind("optimizer.", 0) != 0)
        return Status::failure(cat(reader.directory(), ": tensor '", name,
                                   "' is not a tensor of the model config.json describes"));
      ++optimizerState;
    }
  return Status::success();
}

Status exportDirectory(const std::string &checkpointDir, const std::string &hfDir,
                       const ExportOptions &options, std::string &report) {
  ModelConfig a;
  std::string configText;
  MT_TRY(readModelConfig(options.config, a, &configText));
  const std::string dtype = options.dtype.empty() ? a.dtype : options.dtype;
  if (dtype.empty())
    return Status::failure(cat(options.config, ": its dtype is not bfloat16, float16 or "
                                               "float32; give --dtype"));
  if (dtype != "BF16" && dtype != "F16" && dtype != "F32")
    return Status::failure(cat("--dtype ", dtype, " is not bf16, fp16 or fp32"));
  checkpoint::CheckpointReader reader;
  MT_TRY(checkpoint::CheckpointReader::open(checkpointDir, reader));
  MT_TRY(reader.checkChunks());
  const std::vector<Mapping> maps = mappings(a, a.llama ? "model." : "transformer.");
  int64_t optimizerState = 0;
  MT_TRY(checkExportable(reader, a, maps, options.config, optimizerState));

  // The Hugging Face tensors in mapping order, cut into shards of at most maxShardBytes.
  struct Out {
    safetensors::Entry entry;
    size_t mapping, part;
  };
  std::vector<std::vector<Out>> shards(1);
  uint64_t shardBytes = 0, total = 0;
  for (size_t i = 0; i < maps.size(); ++i)
    for (size_t p = 0; p < maps[i].hf.size(); ++p) {
      if (maps[i].rowsFrom > 0) // written whole with its first rows' mapping
        continue;
      safetensors::Entry e{maps[i].hf[p], dtype, maps[i].hfShapes[p]};
      const uint64_t bytes = safetensors::bytesOf(dtype, e.shape);
      if (!shards.back().empty() && shardBytes + bytes > options.maxShardBytes) {
        shards.emplace_back();
        shardBytes = 0;
      }
      shards.back().push_back({e, i, p});
      shardBytes += bytes;
      total += bytes;
    }
  // A directory of its own: files of an earlier export (a single file beside new shards,
  // or the reverse) would be loaded in place of these.
  std::error_code error;
  if (std::filesystem::exists(hfDir, error) && !std::filesystem::is_empty(hfDir, error))
    return Status::failure(cat(hfDir, ": exists and is not empty; write to a new directory"));
  if (::mkdir(hfDir.c_str(), 0755) != 0 && errno != EEXIST)
    return Status::failure(cat(hfDir, ": cannot create: ", std::strerror(errno)));
  // One mapping's Hugging Face tensors at a time (a fused QKV gives three).
  size_t cached = maps.size();
  std::vector<std::vector<char>> parts;
  auto produce = [&](const Out &o, std::vector<char> &bytes) -> Status {
    if (cached != o.mapping) {
      MT_TRY(hfParts(reader, a, maps, maps[o.mapping], parts));
      cached = o.mapping;
    }
    bytes = fromF32(parts[o.part], dtype);
    return Status::success();
  };
  json weightMap = json::object();
  for (size_t s = 0; s < shards.size(); ++s) {
    char shardName[64];
    std::snprintf(shardName, sizeof shardName, "model-%05zu-of-%05zu.safetensors", s + 1,
                  shards.size());
    const std::string file = shards.size() == 1 ? "model.safetensors" : shardName;
    std::vector<safetensors::Entry> entries;
    for (const Out &o : shards[s]) {
      entries.push_back(o.entry);
      weightMap[o.entry.name] = file;
    }
    MT_TRY(safetensors::write(hfDir + "/" + file, entries, {{"format", "pt"}},
                              [&](size_t i, const safetensors::Sink &sink) {
                                std::vector<char> bytes;
                                MT_TRY(produce(shards[s][i], bytes));
                                return sink(bytes.data(), bytes.size());
                              }));
  }
  if (shards.size() > 1) {
    const std::string text =
        json{{"metadata", {{"total_size", total}}}, {"weight_map", weightMap}}.dump(2) + "\n";
    MT_TRY(AtomicFile::writeWhole(hfDir + "/model.safetensors.index.json", text.data(),
                                  text.size()));
  }
  json config = json::parse(configText); // read and checked by readModelConfig
  // Every spelling the config carries (transformers 5's dtype, 4.x's torch_dtype) says it.
  bool named = false;
  for (const char *key : {"dtype", "torch_dtype"})
    if (config.contains(key) && !config[key].is_null()) {
      config[key] = torchDtypeName(dtype);
      named = true;
    }
  if (!named)
    config["torch_dtype"] = torchDtypeName(dtype);
  const std::string text = config.dump(2) + "\n";
  MT_TRY(AtomicFile::writeWhole(hfDir + "/config.json", text.data(), text.size()));
  report = cat("wrote ", hfDir, ": ", weightMap.size(), " tensors (", torchDtypeName(dtype), ") in ",
               shards.size(), " file", shards.size() > 1 ? "s" : "", " from ",
               reader.directory(),
               optimizerState ? cat(" (weights only: its ", optimizerState,
                                    " optimizer tensors and training state stay behind)")
                              : "");
  return Status::success();
}

} // namespace mt::hf
