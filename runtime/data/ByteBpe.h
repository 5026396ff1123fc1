// Byte-level BPE, the tokenizer of GPT-2, LLaMA 3, Qwen and most models that ship a
// Hugging Face tokenizer.json: text is cut around the added (special) tokens, split into
// pieces by the pre-tokenizer's regular expression (PCRE2, Unicode properties), and each
// piece's UTF-8 bytes are merged pair by pair, the lowest-ranked pair first (the leftmost
// of equals), as the `tokenizers` library does. Read from a tokenizer.json whose model is
// BPE over bytes (pre-tokenizer ByteLevel, or Split then ByteLevel); anything else it
// holds (a normalizer, byte fallback, a Metaspace pre-tokenizer) is refused by name.
#ifndef MT_RUNTIME_DATA_BYTEBPE_H
#define MT_RUNTIME_DATA_BYTEBPE_H

#include "core/Status.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace mt {

class ByteBpe {
public:
  ByteBpe();
  ~ByteBpe();
  ByteBpe(ByteBpe &&) noexcept;
  ByteBpe &operator=(ByteBpe &&) noexcept;

  /// The tokenizer a tokenizer.json describes (its text in `json`, `path` for messages).
  static Status fromJson(const std::string &json, const std::string &path, ByteBpe &out);
  static Status open(const std::string &path, ByteBpe &out);

  /// The ids of `text`, the added tokens it contains included. Bytes that are not UTF-8
  /// read as U+FFFD, one for each maximal ill-formed part, as Python's "replace" reads them.
  Status encode(std::string_view text, std::vector<int32_t> &ids) const;

  /// The id of an added token, by its text.
  std::optional<int32_t> addedToken(std::string_view content) const;
  /// One more than the largest id.
  int64_t vocabularySize() const;

private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// `text` with every ill-formed UTF-8 part replaced by U+FFFD (Python's errors="replace").
std::string validUtf8(std::string_view text);

} // namespace mt

#endif
