#include "data/ByteBpe.h"
#include "core/InputFile.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <nlohmann/json.hpp>
#include <pcre2.h>
#include <utf8proc.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cstdlib>
#include <fstream>
#include <queue>
#include <sstream>
#include <stdexcept>

namespace mt {
namespace {

using Json = nlohmann::json;

/// GPT-2's pre-tokenizer pattern: the ByteLevel pre-tokenizer's own (use_regex).
constexpr const char *kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

/// The longest token a tiktoken file may hold: its merge table splits each token at every
/// byte (cl100k_base's longest is 128 bytes).
constexpr size_t kLongestToken = 1024;

/// The longest piece mtdata merges: the merge works on every byte of a piece at once (a
/// run of letters or of spaces longer than this is refused).
constexpr size_t kLongestPiece = size_t{1} << 24;

/// LLaMA 3's pattern, which is tiktoken's cl100k_base's.
constexpr const char *kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

/// The bytes base64 `text` encodes (RFC 4648, padded); nullopt where it is not base64.
std::optional<std::string> fromBase64(std::string_view text) {
  if (text.size() % 4 != 0) // padded, as Python's b64decode and tiktoken's files have it
    return std::nullopt;
  std::string out;
  uint32_t bits = 0;
  int held = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    int value = c >= 'A' && c <= 'Z'   ? c - 'A'
                : c >= 'a' && c <= 'z' ? c - 'a' + 26
                : c >= '0' && c <= '9' ? c - '0' + 52
                : c == '+'             ? 62
                : c == '/'             ? 63
                                       : -1;
    if (c == '=' && text.find_first_not_of('=', i) == std::string_view::npos)
      break;
    if (value < 0)
      return std::nullopt;
    bits = (bits << 6) | static_cast<uint32_t>(value);
    held += 6;
    if (held >= 8) {
      held -= 8;
      out += static_cast<char>((bits >> held) & 0xFF);
    }
  }
  return out;
}

/// GPT-2's printable stand-ins for bytes, which byte-level vocabularies are written in:
/// the printable Latin-1 bytes stand for themselves, the other 68 for U+0100 onwards.
std::array<uint32_t, 256> byteCodePoints() {
  std::array<uint32_t, 256> points{};
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
    points[b] = printable ? b : next++;
  }
  return points;
}

/// The code points of valid UTF-8 `s`.
std::vector<uint32_t> codePoints(std::string_view s) {
  std::vector<uint32_t> points;
  for (size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    const int length = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
    uint32_t c = length == 1 ? b : b & (0x3F >> (length - 1));
    for (int k = 1; k < length && i + k < s.size(); ++k)
      c = (c << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    points.push_back(c);
    i += length;
  }
  return points;
}

/// A vocabulary entry written in byte stand-ins, as its bytes; nullopt where a character
/// stands for no byte (an added token's text, say).
std::optional<std::string> standInBytes(std::string_view written,
                                        const std::unordered_map<uint32_t, char> &byteOf) {
  std::string bytes;
  for (uint32_t c : codePoints(written)) {
    auto found = byteOf.find(c);
    if (found == byteOf.end())
      return std::nullopt;
    bytes += found->second;
  }
  return bytes;
}

/// `pattern` with \s and \S spelled as Unicode's White_Space, which Oniguruma (tokenizers)
/// and Rust's regex (tiktoken) mean by them; PCRE2's \s also takes U+180E.
Status unicodeWhiteSpace(const std::string &pattern, std::string &out) {
  const std::string space = "\\t-\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}"
                            "\\x{2029}\\x{202F}\\x{205F}\\x{3000}";
  bool inClass = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char next = pattern[++i];
      if (next == 's')
        out += inClass ? space : "[" + space + "]";
      else if (next == 'S' && !inClass)
        out += "[^" + space + "]";
      else if (next == 'S')
        return Status::failure("the pre-tokenizer's pattern has \\S inside a class");
      else
        out += {c, next};
      continue;
    }
    if (c == '[' && !inClass) {
      inClass = true;
      out += c;
      // A ']' (after an optional '^') first in a class is a literal.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^')
        out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']')
        out += pattern[++i];
      continue;
    }
    if (c == ']' && inClass)
      inClass = false;
    out += c;
  }
  return Status::success();
}

/// Added tokens, matched in the text before anything else: at the leftmost place one
/// starts, the longest.
struct AddedTokens {
  std::vector<std::pair<std::string, int32_t>> tokens; // longest first
  std::array<bool, 256> starts{};                      // their first bytes

  void add(std::string content, int32_t id) {
    starts[static_cast<unsigned char>(content[0])] = true;
    tokens.emplace_back(std::move(content), id);
    std::stable_sort(tokens.begin(), tokens.end(),
                     [](const auto &a, const auto &b) { return a.first.size() > b.first.size(); });
  }
  /// The token at `at`, or null.
  const std::pair<std::string, int32_t> *at(std::string_view text, size_t at) const {
    if (starts[static_cast<unsigned char>(text[at])])
      for (const auto &token : tokens)
        if (text.compare(at, token.first.size(), token.first) == 0)
          return &token;
    return nullptr;
  }
  /// segment(text between tokens) and token(id), in the order of the text.
  template <typename Segment, typename Token>
  Status cut(std::string_view text, Segment &&segment, Token &&token) const {
    size_t from = 0;
    for (size_t i = 0; i < text.size();) {
      const std::pair<std::string, int32_t> *found = at(text, i);
      if (!found) {
        ++i;
        continue;
      }
      MT_TRY(segment(text.substr(from, i - from)));
      token(found->second);
      i = from = i + found->first.size();
    }
    return segment(text.substr(from));
  }
};

/// PCRE2's words for its error `code`.
std::string pcre2Message(int code) {
  PCRE2_UCHAR message[256];
  pcre2_get_error_message(code, message, sizeof message);
  return reinterpret_cast<const char *>(message);
}

struct PairHash {
  size_t operator()(uint64_t key) const {
    return std::hash<uint64_t>()(key * 0x9E3779B97F4A7C15ull);
  }
};
uint64_t pairKey(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

} // namespace

std::string validUtf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  const std::string_view replacement = "\xEF\xBF\xBD";
  size_t i = 0;
  while (i < text.size()) {
    const auto b = static_cast<unsigned char>(text[i]);
    if (b < 0x80) {
      out += static_cast<char>(b);
      ++i;
      continue;
    }
    // The sequence's length and the range its second byte must lie in (Unicode's table
    // of well-formed UTF-8: no overlong forms, no surrogates, nothing past U+10FFFF).
    int length = 0;
    unsigned char low = 0x80, high = 0xBF;
    if (b >= 0xC2 && b <= 0xDF)
      length = 2;
    else if (b >= 0xE0 && b <= 0xEF) {
      length = 3;
      low = b == 0xE0 ? 0xA0 : 0x80;
      high = b == 0xED ? 0x9F : 0xBF;
    } else if (b >= 0xF0 && b <= 0xF4) {
      length = 4;
      low = b == 0xF0 ? 0x90 : 0x80;
      high = b == 0xF4 ? 0x8F : 0xBF;
    }
    // The longest well-formed prefix: one U+FFFD stands for it where it is cut short.
    int good = length == 0 ? 0 : 1;
    for (int k = 1; k < length && i + k < text.size(); ++k) {
      const auto c = static_cast<unsigned char>(text[i + k]);
      if (c < (k == 1 ? low : 0x80) || c > (k == 1 ? high : 0xBF))
        break;
      ++good;
    }
    if (length > 0 && good == length)
      out.append(text.substr(i, length));
    else
      out.append(replacement);
    i += std::max(good, 1);
  }
  return out;
}

struct ByteBpe::Impl {
  std::string path;
  std::unordered_map<std::string, int32_t> ids; // a token's bytes → its id
  std::array<int32_t, 256> byteIds{};           // each single byte's id
  struct Merge {
    int32_t rank, id;
  };
  std::unordered_map<uint64_t, Merge, PairHash> merges; // (left, right) → rank, merged id
  // Added tokens, as tokenizers extracts them: those matched in the text as written
  // first, then in what is left, normalized, those whose text is normalized alike.
  AddedTokens added, addedNormalized;
  // The normalizer's Unicode normal forms, in order, as utf8proc's options.
  std::vector<utf8proc_option_t> normalForms;
  std::unordered_map<std::string, int32_t> named; // tokens named, not matched in text
  pcre2_code *pattern = nullptr;
  pcre2_match_data *match = nullptr;
  bool addPrefixSpace = false, ignoreMerges = false;
  int64_t size = 0;

  ~Impl() {
    if (match)
      pcre2_match_data_free(match);
    if (pattern)
      pcre2_code_free(pattern);
  }

  /// `text` (valid UTF-8) in each of the normalizer's forms in turn.
  Status normalize(std::string_view text, std::string &out) const {
    out = text;
    for (utf8proc_option_t form : normalForms) {
      utf8proc_uint8_t *mapped = nullptr;
      const utf8proc_ssize_t n =
          utf8proc_map(reinterpret_cast<const utf8proc_uint8_t *>(out.data()),
                       static_cast<utf8proc_ssize_t>(out.size()), &mapped, form);
      if (n < 0)
        return Status::failure(
            cat("cannot normalize ", out.size(), " bytes of text: ", utf8proc_errmsg(n)));
      out.assign(reinterpret_cast<const char *>(mapped), static_cast<size_t>(n));
      std::free(mapped);
    }
    return Status::success();
  }

  /// Each single byte's id, from `ids`: -1, or the first byte that has none.
  int findByteIds() {
    for (int b = 0; b < 256; ++b) {
      auto found = ids.find(std::string(1, static_cast<char>(b)));
      if (found == ids.end())
        return b;
      byteIds[b] = found->second;
    }
    return -1;
  }

  /// From a tokenizer.json (Refused, Malformed or Json::exception where it cannot):
  /// the vocabulary and merges, with each token's text as written in `written`; the added
  /// tokens.
  void readVocabulary(const Json &model, std::unordered_map<std::string, int32_t> &written);
  void readAddedTokens(const Json &json, const std::unordered_map<std::string, int32_t> &written);

  Status compile(const std::string &written) {
    std::string regex;
    if (Status s = unicodeWhiteSpace(written, regex); !s.ok())
      return Status::failure(cat(path, ": ", s.message()));
    int code = 0;
    PCRE2_SIZE offset = 0;
    pattern =
        pcre2_compile(reinterpret_cast<PCRE2_SPTR>(regex.data()), regex.size(),
                      PCRE2_UTF | PCRE2_UCP | PCRE2_NEVER_BACKSLASH_C, &code, &offset, nullptr);
    if (!pattern)
      return Status::failure(cat(path, ": the pre-tokenizer's pattern does not compile at ", offset,
                                 ": ", pcre2Message(code)));
    pcre2_jit_compile(pattern, PCRE2_JIT_COMPLETE); // faster where it can; else interpreted
    match = pcre2_match_data_create_from_pattern(pattern, nullptr);
    return Status::success();
  }

  /// The pieces of valid UTF-8 `text`: each match of the pattern, and the text between
  /// matches ("Isolated").
  Status split(std::string_view text, std::vector<std::string_view> &pieces) const {
    size_t at = 0, from = 0;
    while (at <= text.size()) {
      const int found = pcre2_match(pattern, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(),
                                    at, PCRE2_NO_UTF_CHECK, match, nullptr);
      if (found == PCRE2_ERROR_NOMATCH)
        break;
      if (found < 0)
        return Status::failure(
            cat(path, ": the pre-tokenizer's pattern failed: ", pcre2Message(found)));
      const PCRE2_SIZE *span = pcre2_get_ovector_pointer(match);
      if (span[0] > from)
        pieces.push_back(text.substr(from, span[0] - from));
      if (span[1] > span[0]) {
        pieces.push_back(text.substr(span[0], span[1] - span[0]));
        at = from = span[1];
      } else { // an empty match: go on from the next character
        from = span[0];
        at = span[1] + 1;
        while (at < text.size() && (static_cast<unsigned char>(text[at]) & 0xC0) == 0x80)
          ++at;
      }
    }
    if (from < text.size())
      pieces.push_back(text.substr(from));
    return Status::success();
  }

  /// Appends the ids of one piece's bytes.
  void mergePiece(std::string_view bytes, std::vector<int32_t> &out) const {
    if (ignoreMerges)
      if (auto whole = ids.find(std::string(bytes)); whole != ids.end()) {
        out.push_back(whole->second);
        return;
      }
    struct Symbol {
      int32_t id;
      int prev, next;
    };
    std::vector<Symbol> symbols(bytes.size());
    for (size_t i = 0; i < bytes.size(); ++i)
      symbols[i] = {byteIds[static_cast<unsigned char>(bytes[i])], static_cast<int>(i) - 1,
                    i + 1 < bytes.size() ? static_cast<int>(i + 1) : -1};
    // The pairs that can merge, lowest rank first, then leftmost; an entry whose symbols
    // have changed since it was queued is stale and skipped.
    struct Candidate {
      int32_t rank;
      int left;
      int32_t leftId, rightId, merged;
      bool operator>(const Candidate &o) const {
        return rank != o.rank ? rank > o.rank : left > o.left;
      }
    };
    std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
    auto consider = [&](int left) {
      if (left < 0 || symbols[left].next < 0)
        return;
      const int32_t a = symbols[left].id, b = symbols[symbols[left].next].id;
      if (auto m = merges.find(pairKey(a, b)); m != merges.end())
        queue.push({m->second.rank, left, a, b, m->second.id});
    };
    for (int i = 0; i + 1 < static_cast<int>(symbols.size()); ++i)
      consider(i);
    while (!queue.empty()) {
      const Candidate c = queue.top();
      queue.pop();
      Symbol &left = symbols[c.left];
      if (left.id != c.leftId || left.next < 0 || symbols[left.next].id != c.rightId)
        continue;
      const int right = left.next;
      left.id = c.merged;
      left.next = symbols[right].next;
      if (left.next >= 0)
        symbols[left.next].prev = c.left;
      symbols[right].id = -1; // merged away
      consider(left.prev);
      consider(c.left);
    }
    for (int i = 0; i >= 0 && !symbols.empty(); i = symbols[i].next)
      out.push_back(symbols[i].id);
  }
};

ByteBpe::ByteBpe() : impl_(std::make_unique<Impl>()) {}
ByteBpe::~ByteBpe() = default;
ByteBpe::ByteBpe(ByteBpe &&) noexcept = default;
ByteBpe &ByteBpe::operator=(ByteBpe &&) noexcept = default;

Status ByteBpe::open(const std::string &path, ByteBpe &out) {
  std::string content;
  MT_TRY(readRegularFile(path, limits::kTokenizerBytes, "a tokenizer", content));
  return looksLikeTiktoken(std::string_view(content).substr(0, 4096))
             ? fromTiktoken(content, path, out)
             : fromJson(content, path, out);
}

namespace {

/// What mtdata does not compute, named.
struct Refused : std::runtime_error {
  using std::runtime_error::runtime_error;
};
/// What is wrong with the file otherwise.
struct Malformed : std::runtime_error {
  using std::runtime_error::runtime_error;
};

std::string typeOf(const Json &j) {
  return j.is_object() && j.contains("type") && j["type"].is_string() ? j["type"].get<std::string>()
                                                                      : std::string("?");
}

/// An id: an integer in [0, 2^31).
int32_t idOf(const Json &j, const std::string &what) {
  if (!j.is_number_integer() || j.get<int64_t>() < 0 || j.get<int64_t>() > INT32_MAX)
    throw Malformed(what + " has id " + // a nest named, not dumped: dumping recurses
                    (j.is_object()  ? std::string("an object")
                     : j.is_array() ? std::string("a list")
                                    : j.dump().substr(0, 40)) +
                    ", not an integer in [0, 2^31)");
  return static_cast<int32_t>(j.get<int64_t>());
}

/// The BPE model's settings mtdata computes; refuses the others.
void checkModel(const Json &model) {
  if (typeOf(model) != "BPE")
    throw Refused("model type " + typeOf(model));
  for (const char *flag : {"byte_fallback", "fuse_unk"})
    if (model.value(flag, false))
      throw Refused(std::string(flag) + " is set");
  for (const char *affix : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (model.contains(affix) && !model[affix].is_null() && model[affix] != "")
      throw Refused(std::string(affix) + " is set");
  if (model.contains("dropout") && !model["dropout"].is_null() && model["dropout"] != 0.0)
    throw Refused("BPE dropout is set");
}

/// The Unicode normal forms a tokenizer.json's `normalizer` applies (Qwen2's NFC, say),
/// alone or in a Sequence, in order, as utf8proc's options; any other is refused by name.
std::vector<utf8proc_option_t> normalFormsOf(const Json &json) {
  if (!json.contains("normalizer") || json["normalizer"].is_null())
    return {};
  const Json &normalizer = json["normalizer"];
  const std::vector<Json> stages = typeOf(normalizer) == "Sequence"
                                       ? normalizer.at("normalizers").get<std::vector<Json>>()
                                       : std::vector<Json>{normalizer};
  const std::pair<const char *, int> forms[] = {{"NFC", UTF8PROC_COMPOSE},
                                                {"NFD", UTF8PROC_DECOMPOSE},
                                                {"NFKC", UTF8PROC_COMPOSE | UTF8PROC_COMPAT},
                                                {"NFKD", UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT}};
  std::vector<utf8proc_option_t> out;
  for (const Json &stage : stages) {
    const std::string type = typeOf(stage);
    const auto form = std::find_if(std::begin(forms), std::end(forms),
                                   [&](const auto &f) { return type == f.first; });
    if (form == std::end(forms))
      throw Refused("normalizer " + type);
    out.push_back(static_cast<utf8proc_option_t>(UTF8PROC_STABLE | form->second));
  }
  return out;
}

/// The pattern the pre-tokenizer splits by: ByteLevel's own (GPT-2's), or a Split's
/// before a ByteLevel without one; and whether ByteLevel adds a space in front.
std::string preTokenizerPattern(const Json &pre, bool &addPrefixSpace) {
  std::vector<Json> stages = typeOf(pre) == "Sequence"
                                 ? pre.at("pretokenizers").get<std::vector<Json>>()
                                 : std::vector<Json>{pre};
  std::string regex;
  bool byteLevel = false;
  for (const Json &stage : stages) {
    const std::string type = typeOf(stage);
    if (type == "Split" && regex.empty() && !byteLevel) {
      const Json &p = stage.at("pattern");
      if (!p.contains("Regex"))
        throw Refused("a Split pre-tokenizer on a plain string");
      regex = p["Regex"].get<std::string>();
      if (stage.value("behavior", std::string()) != "Isolated" || stage.value("invert", false))
        throw Refused("a Split pre-tokenizer that does not isolate its matches");
    } else if (type == "ByteLevel" && !byteLevel) {
      byteLevel = true;
      addPrefixSpace = stage.value("add_prefix_space", false);
      if (addPrefixSpace && !regex.empty()) // tokenizers adds one to every Split piece
        throw Refused("ByteLevel's add_prefix_space after a Split pre-tokenizer");
      if (stage.value("use_regex", true)) {
        if (!regex.empty())
          throw Refused("a Split pre-tokenizer before ByteLevel's own pattern");
        regex = kGpt2Pattern;
      }
    } else {
      throw Refused("pre-tokenizer " + type);
    }
  }
  if (!byteLevel || regex.empty())
    throw Refused("no ByteLevel pre-tokenizer with a pattern");
  return regex;
}

} // namespace

void ByteBpe::Impl::readVocabulary(const Json &model,
                                   std::unordered_map<std::string, int32_t> &written) {
  // Written in byte stand-ins; added tokens may also be in it.
  std::unordered_map<uint32_t, char> byteOf;
  const std::array<uint32_t, 256> points = byteCodePoints();
  for (int b = 0; b < 256; ++b)
    byteOf[points[b]] = static_cast<char>(b);
  for (const auto &[token, id] : model.at("vocab").items()) {
    const int32_t value = idOf(id, "token '" + token + "'");
    written[token] = value;
    size = std::max<int64_t>(size, int64_t{value} + 1);
    if (std::optional<std::string> bytes = standInBytes(token, byteOf))
      ids.emplace(*bytes, value);
  }
  if (int missing = findByteIds(); missing >= 0)
    throw Malformed(cat("the vocabulary has no token for byte ", missing));
  // Merges, "left right" or [left, right], in rank order; a pair given twice merges at
  // its last rank, as tokenizers reads it.
  const Json &list = model.at("merges");
  for (size_t rank = 0; rank < list.size(); ++rank) {
    std::string left, right;
    if (list[rank].is_string()) {
      const std::string both = list[rank].get<std::string>();
      const size_t space = both.find(' ');
      if (space == std::string::npos || both.find(' ', space + 1) != std::string::npos)
        throw Malformed(cat("merge ", rank, " '", both, "' is not two tokens"));
      left = both.substr(0, space);
      right = both.substr(space + 1);
    } else {
      left = list[rank].at(0).get<std::string>();
      right = list[rank].at(1).get<std::string>();
    }
    auto a = written.find(left), b = written.find(right), ab = written.find(left + right);
    if (a == written.end() || b == written.end() || ab == written.end())
      throw Malformed(
          cat("merge ", rank, " ('", left, "', '", right, "') names a token the vocabulary lacks"));
    merges.insert_or_assign(pairKey(a->second, b->second),
                            Merge{static_cast<int32_t>(rank), ab->second});
  }
}

void ByteBpe::Impl::readAddedTokens(const Json &json,
                                    const std::unordered_map<std::string, int32_t> &written) {
  if (!json.contains("added_tokens") || !json["added_tokens"].is_array())
    return;
  // One the vocabulary holds has its id there, as tokenizers gives it.
  for (const Json &token : json["added_tokens"]) {
    const std::string content = token.at("content").get<std::string>();
    for (const char *flag : {"single_word", "lstrip", "rstrip"})
      if (token.value(flag, false))
        throw Refused("added token '" + content + "' sets " + flag);
    const int32_t id = idOf(token.at("id"), "added token '" + content + "'");
    if (content.empty() || content != validUtf8(content))
      throw Malformed("an added token is empty or not UTF-8");
    if (auto held = written.find(content); held != written.end() && held->second != id)
      throw Malformed(
          cat("added token '", content, "' has id ", id, ", the vocabulary ", held->second));
    std::string normal;
    if (!token.value("normalized", false))
      added.add(content, id);
    else if (Status s = normalize(content, normal); !s.ok()) // matched in normalized text
      throw Malformed("added token '" + content + "': " + s.message());
    else
      addedNormalized.add(normal, id);
    size = std::max<int64_t>(size, int64_t{id} + 1);
  }
}

Status ByteBpe::fromJson(const std::string &text, const std::string &path, ByteBpe &out) {
  const Json json = Json::parse(text, nullptr, false);
  if (json.is_discarded() || !json.is_object())
    return Status::failure(path + ": not a tokenizer.json (not a JSON object)");
  ByteBpe made;
  Impl &t = *made.impl_;
  t.path = path;
  try {
    const Json &model = json.at("model");
    checkModel(model);
    t.normalForms = normalFormsOf(json);
    t.ignoreMerges = model.value("ignore_merges", false);
    MT_TRY(t.compile(preTokenizerPattern(json.at("pre_tokenizer"), t.addPrefixSpace)));
    std::unordered_map<std::string, int32_t> written;
    t.readVocabulary(model, written);
    t.readAddedTokens(json, written);
  } catch (const Refused &e) {
    return Status::failure(cat(path, ": ", e.what(), ": mtdata reads byte-level BPE tokenizers"));
  } catch (const Malformed &e) {
    return Status::failure(cat(path, ": ", e.what()));
  } catch (const Json::exception &e) {
    return Status::failure(cat(path, ": not a tokenizer.json mtdata reads: ", e.what()));
  }
  out = std::move(made);
  return Status::success();
}

Status ByteBpe::encode(std::string_view raw, std::vector<int32_t> &ids) const {
  const Impl &t = *impl_;
  const std::string text = validUtf8(raw);
  std::vector<std::string_view> pieces;
  // Encodes the text between two added tokens.
  auto encodeSegment = [&](std::string_view segment) -> Status {
    if (segment.empty())
      return Status::success();
    std::string prefixed;
    if (t.addPrefixSpace && segment.front() != ' ') {
      prefixed = " " + std::string(segment);
      segment = prefixed;
    }
    pieces.clear();
    MT_TRY(t.split(segment, pieces));
    for (std::string_view piece : pieces) {
      if (piece.size() > kLongestPiece)
        return Status::failure(
            cat("a piece of ", piece.size(), " bytes: mtdata merges at most ", kLongestPiece));
      t.mergePiece(piece, ids);
    }
    return Status::success();
  };
  auto token = [&](int32_t id) { ids.push_back(id); };
  return t.added.cut(
      text,
      [&](std::string_view between) {
        if (t.normalForms.empty())
          return t.addedNormalized.cut(between, encodeSegment, token);
        std::string normal;
        MT_TRY(t.normalize(between, normal));
        return t.addedNormalized.cut(normal, encodeSegment, token);
      },
      token);
}

std::optional<int32_t> ByteBpe::addedToken(std::string_view content) const {
  for (const auto &[text, id] : impl_->added.tokens)
    if (text == content)
      return id;
  std::string normal;
  if (impl_->normalize(validUtf8(content), normal).ok())
    for (const auto &[text, id] : impl_->addedNormalized.tokens)
      if (text == normal)
        return id;
  if (auto found = impl_->named.find(std::string(content)); found != impl_->named.end())
    return found->second;
  return std::nullopt;
}

bool ByteBpe::looksLikeTiktoken(std::string_view start) {
  // "base64 rank" on the first line.
  const size_t space = start.find(' ');
  if (space == 0 || space == std::string_view::npos)
    return false;
  const size_t end = start.find('\n');
  const std::string_view rank = start.substr(
      space + 1, end == std::string_view::npos ? std::string_view::npos : end - space - 1);
  return fromBase64(start.substr(0, space)).has_value() && !rank.empty() &&
         rank.find_first_not_of("0123456789\r") == std::string_view::npos;
}

Status ByteBpe::fromTiktoken(const std::string &text, const std::string &path, ByteBpe &out) {
  ByteBpe made;
  Impl &t = *made.impl_;
  t.path = path;
  t.ignoreMerges = true; // tiktoken takes a piece it holds whole as it is
  std::istringstream lines(text);
  std::string line;
  for (int64_t number = 1; std::getline(lines, line); ++number) {
    if (!line.empty() && line.back() == '\r')
      line.pop_back();
    if (line.empty())
      continue;
    const size_t space = line.find(' ');
    std::optional<std::string> bytes =
        space == std::string::npos ? std::nullopt : fromBase64(line.substr(0, space));
    char *end = nullptr;
    const long long rank = bytes ? std::strtoll(line.c_str() + space + 1, &end, 10) : -1;
    if (!bytes || bytes->empty() || end == line.c_str() + space + 1 || *end != '\0' || rank < 0 ||
        rank >= INT32_MAX - 256)
      return Status::failure(cat(path, ": line ", number, " is not 'base64 rank'"));
    if (bytes->size() > kLongestToken)
      return Status::failure(cat(path, ": line ", number, " has a token of ", bytes->size(),
                                 " bytes (at most ", kLongestToken, ")"));
    if (rank != t.size)
      return Status::failure(cat(path, ": line ", number, " has rank ", rank, ", not ", t.size,
                                 ": ranks are 0, 1, 2... in order"));
    if (!t.ids.emplace(*bytes, static_cast<int32_t>(rank)).second)
      return Status::failure(cat(path, ": line ", number, " repeats a token"));
    ++t.size;
  }
  if (int missing = t.findByteIds(); missing >= 0)
    return Status::failure(cat(path, ": no token for byte ", missing));
  // A pair merges where its two tokens joined are a token, at that token's rank.
  for (const auto &[bytes, id] : t.ids)
    for (size_t k = 1; k < bytes.size(); ++k) {
      auto a = t.ids.find(bytes.substr(0, k)), b = t.ids.find(bytes.substr(k));
      if (a != t.ids.end() && b != t.ids.end())
        t.merges.emplace(pairKey(a->second, b->second), Impl::Merge{id, id});
    }
  t.named = {{"<|begin_of_text|>", static_cast<int32_t>(t.size)},
             {"<|end_of_text|>", static_cast<int32_t>(t.size + 1)}};
  t.size += 256;
  MT_TRY(t.compile(kLlama3Pattern));
  out = std::move(made);
  return Status::success();
}

int64_t ByteBpe::vocabularySize() const { return impl_->size; }

} // namespace mt
