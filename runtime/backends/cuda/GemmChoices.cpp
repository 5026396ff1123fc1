#include "backends/cuda/GemmChoices.h"

#include "core/AtomicFile.h"
#include "core/InputFile.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <utility>
#include <vector>

namespace mt {
namespace {

/// A line per shape a model runs, a few hundred bytes each with its comments.
constexpr uint64_t kChoicesBytes = uint64_t{16} << 20;

bool parseWord(const std::string &token, uint64_t &out) {
  if (token.empty() || token.size() > 16)
    return false;
  out = 0;
  for (char c : token) {
    const int digit = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (digit < 0)
      return false;
    out = out << 4 | static_cast<uint64_t>(digit);
  }
  return true;
}

} // namespace

Status GemmChoices::load(const std::string &path, GemmChoices &out) {
  out = GemmChoices{};
  out.path_ = path;
  struct stat info;
  if (::lstat(path.c_str(), &info) != 0 && errno == ENOENT)
    return Status::success(); // the first run writes it
  std::string text;
  MT_TRY(readRegularFile(path, kChoicesBytes, "a file of GEMM choices", text));
  out.unterminated_ = !text.empty() && text.back() != '\n';
  std::istringstream lines(text);
  std::string line;
  for (int number = 1; std::getline(lines, line); ++number) {
    std::istringstream tokens(line);
    std::vector<std::string> words;
    for (std::string word; tokens >> word;)
      words.push_back(word);
    if (words.empty() || words[0][0] == '#')
      continue;
    auto bad = [&](const char *why) {
      return Status::failure(cat(path, ":", number, ": ", why,
                                 " (a line is `gemm KEY... algo` and eight hex words; delete the "
                                 "file to choose again)"));
    };
    const size_t n = words.size();
    if (words[0] != "gemm")
      return bad("not a GEMM's line");
    if (n < 11 || words[n - 9] != "algo")
      return bad("no `algo` and eight words at its end");
    GemmAlgorithm algorithm;
    for (size_t i = 0; i < 8; ++i)
      if (!parseWord(words[n - 8 + i], algorithm[i]))
        return bad("a word of the algorithm is not 1 to 16 lower-case hex digits");
    std::string key = words[1];
    for (size_t i = 2; i + 9 < n; ++i)
      key += " " + words[i];
    out.chosen_.emplace(key, algorithm); // the first line of a key holds
  }
  return Status::success();
}

const GemmAlgorithm *GemmChoices::find(const std::string &key) const {
  auto found = chosen_.find(key);
  return found == chosen_.end() ? nullptr : &found->second;
}

std::string GemmChoices::line(const std::string &key, const GemmAlgorithm &algorithm) {
  std::string text = "gemm " + key + " algo";
  for (uint64_t word : algorithm) {
    char hex[20];
    std::snprintf(hex, sizeof hex, " %" PRIx64, word);
    text += hex;
  }
  return text + "\n";
}

Status GemmChoices::add(const std::string &key, const GemmAlgorithm &algorithm,
                        const std::string &comment) {
  if (!chosen_.emplace(key, algorithm).second)
    return Status::success();
  // A last line left without its newline (by hand) is ended first.
  std::string text = std::exchange(unterminated_, false) ? "\n" : "";
  std::istringstream lines(comment);
  for (std::string each; std::getline(lines, each);)
    text += "# " + each + "\n";
  text += line(key, algorithm);
  std::FILE *file = nullptr;
  MT_TRY(openForAppending(path_, file));
  // One write(2) of the whole entry, appended (O_APPEND) at once: ranks adding to one file
  // do not interleave their lines.
  ssize_t written;
  do
    written = ::write(::fileno(file), text.data(), text.size());
  while (written < 0 && errno == EINTR);
  const int error = written < 0 ? errno : ENOSPC; // a short write: the disk is full
  std::fclose(file);
  if (written != static_cast<ssize_t>(text.size()))
    return Status::failure(cat("cannot write ", path_, ": ", std::strerror(error)));
  return Status::success();
}

} // namespace mt
