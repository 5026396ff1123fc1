// Byte-level BPE, the tokenizer of GPT-2, LLaMA 3, Qwen2 and many models that ship a
// Hugging Face tokenizer.json: text is cut around the added (special) tokens, brought to
// the normalizer's Unicode normal forms (utf8proc), split into pieces by the
// pre-tokenizer's regular expression (PCRE2, Unicode properties), and each piece's UTF-8
// bytes are merged pair by pair, the lowest-ranked pair first (the leftmost of equals), as
// the `tokenizers` library does. Read from a tokenizer.json whose model is BPE over bytes
// (pre-tokenizer ByteLevel, or Split then ByteLevel; normalizer none, or NFC, NFD, NFKC,
// NFKD, or a Sequence of them); anything else it holds (another normalizer, byte fallback,
// a Metaspace pre-tokenizer) is refused by name; or from a tiktoken file, as tiktoken
// computes it.
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
  /// The tokenizer a tiktoken file describes (LLaMA 3's original tokenizer.model): a line
  /// per token, its bytes in base64 and its rank, which is its id. Text is split by LLaMA
  /// 3's pattern (tiktoken's cl100k_base's) and encoded as tiktoken's encode_ordinary does:
  /// special tokens in the text are text. LLaMA 3's 256 special tokens follow the ranks,
  /// <|begin_of_text|> and <|end_of_text|> first, the only two of them named here.
  static Status fromTiktoken(const std::string &text, const std::string &path, ByteBpe &out);
  /// A tokenizer.json, or a tiktoken file, by its first bytes.
  static Status open(const std::string &path, ByteBpe &out);
  /// Whether the first bytes of a file are a tiktoken file's.
  static bool looksLikeTiktoken(std::string_view start);

  /// The ids of `text`, the added tokens it contains included. Bytes that are not UTF-8
  /// read as U+FFFD, one for each maximal ill-formed part, as Python's "replace" reads them.
  Status encode(std::string_view text, std::vector<int32_t> &ids) const;

  /// The id of an added (or, from tiktoken, special) token, by its text.
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
