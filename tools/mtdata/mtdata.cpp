// mtdata: tokenizes text into a Megatron indexed dataset (PREFIX.bin, PREFIX.idx), the
// training data of mtrun, as Megatron's tools/preprocess_data.py does with
// --append-eod: every document is encoded, ends with the tokenizer's end-of-sequence
// id, and becomes one sequence.
//
//   mtdata --input FILE [--input FILE ...] --output-prefix PREFIX
//          (--tokenizer MODEL.model | --tokenizer tokenizer.json|tiktoken [--eod-token TEXT]
//           | --train-tokenizer MODEL_PREFIX --vocab-size N)
//          [--split-on LINE]
#include "core/AtomicFile.h"
#include "core/InputFile.h"
#include "data/ByteBpe.h"
#include "data/IndexedDataset.h"

#include <nlohmann/json.hpp>
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <sys/stat.h>
#include <unistd.h>

namespace {

constexpr const char *kUsage = R"(usage:
  mtdata --input FILE [--input FILE ...] --output-prefix PREFIX
         (--tokenizer MODEL.model | --tokenizer tokenizer.json|tiktoken [--eod-token TEXT]
          | --train-tokenizer MODEL_PREFIX --vocab-size N)
         [--split-on LINE]

  --input FILE            text to tokenize; each file is one document unless
                          --split-on splits it
  --output-prefix PREFIX  writes PREFIX.bin and PREFIX.idx, Megatron's indexed dataset
  --tokenizer MODEL       encodes with an existing SentencePiece model, with the
                          byte-level BPE of a Hugging Face tokenizer.json (GPT-2,
                          LLaMA 3, Qwen...: the ids the `tokenizers` library gives),
                          or with a tiktoken file (LLaMA 3's original tokenizer.model:
                          the ids tiktoken's encode_ordinary gives, LLaMA 3's pattern);
                          or a model's directory: its tokenizer.model, else its
                          tokenizer.json, else original/tokenizer.model (and its
                          tokenizer_config.json)
  --eod-token TEXT        with a tokenizer.json or tiktoken file: the added token that
                          ends each document (default: tokenizer_config.json's eos_token
                          beside it, else <|endoftext|>, <|end_of_text|> or </s>)
  --train-tokenizer MODEL_PREFIX
                          first trains a SentencePiece BPE model of --vocab-size N
                          pieces on the inputs: MODEL_PREFIX.model
  --split-on LINE         a line that is exactly LINE separates documents
                          (--split-on % reads fortune files)
)";

int usageError(const std::string &message) {
  std::cerr << "mtdata: " << message << "\n" << kUsage;
  return 2;
}

int inputError(const std::string &message) {
  std::cerr << "mtdata: " << message << "\n";
  return 1;
}

/// Whether `path` names a regular file (without opening it: a FIFO would block).
bool isRegularFile(const std::string &path) {
  struct stat info;
  return ::stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode);
}

/// Whether `path` names a directory.
bool isDirectory(const std::string &path) {
  struct stat info;
  return ::stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode);
}

/// The tokenizer a model's directory (as Hugging Face's hub holds one) holds: its
/// tokenizer.model (SentencePiece's: LLaMA 2, Mistral, Mixtral, whose tokenizer.json beside
/// it is SentencePiece's too, which mtdata does not read), else its tokenizer.json (LLaMA
/// 3, Qwen: byte-level BPE), else LLaMA 3's tiktoken file, original/tokenizer.model; ""
/// where it holds none.
std::string tokenizerIn(const std::string &directory) {
  for (const char *name : {"tokenizer.model", "tokenizer.json", "original/tokenizer.model"})
    if (isRegularFile(directory + "/" + name))
      return directory + "/" + name;
  return "";
}

/// Whether `path` is a byte-level BPE tokenizer: a Hugging Face tokenizer.json (by its
/// name) or a tiktoken file (by its first line); anything else is a SentencePiece model.
bool isByteLevel(const std::string &path) {
  if (path.size() >= 5 && path.compare(path.size() - 5, 5, ".json") == 0)
    return true;
  int fd = -1;
  uint64_t bytes = 0;
  if (!mt::openRegularFile(path, fd, bytes).ok()) // reported when it is loaded
    return false;
  std::string start(4096, '\0');
  const ssize_t n = ::read(fd, start.data(), start.size());
  ::close(fd);
  start.resize(n > 0 ? static_cast<size_t>(n) : 0);
  return mt::ByteBpe::looksLikeTiktoken(start);
}

struct Options {
  std::vector<std::string> inputs;
  std::string outputPrefix, tokenizer, trainTokenizer, splitOn, eodToken;
  std::string modelDirectory; // where --tokenizer named a model's directory
  bool splitting = false, help = false;
  int vocabularySize = 0;
};

/// Parses `--flag value` and `--flag=value`; returns an error message or "".
std::string parseArgs(int argc, char **argv, Options &options) {
  std::string vocabulary;
  // Flags given once; --input may repeat.
  const std::unordered_map<std::string, std::string *> singleFlags = {
      {"output-prefix", &options.outputPrefix},
      {"tokenizer", &options.tokenizer},
      {"train-tokenizer", &options.trainTokenizer},
      {"vocab-size", &vocabulary},
      {"split-on", &options.splitOn},
      {"eod-token", &options.eodToken}};
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      options.help = true;
      return "";
    }
    if (arg.rfind("--", 0) != 0)
      return "unexpected argument '" + arg + "'";
    std::string name = arg.substr(2), value;
    size_t equals = name.find('=');
    if (equals != std::string::npos)
      name.resize(equals);
    const auto single = singleFlags.find(name);
    if (name != "input" && single == singleFlags.end())
      return "unknown flag '--" + name + "'";
    if (equals != std::string::npos)
      value = arg.substr(2 + equals + 1);
    else if (i + 1 < argc)
      value = argv[++i];
    else
      return "--" + name + " needs a value";
    if (name == "input")
      options.inputs.push_back(value);
    else
      *single->second = value;
    if (name == "split-on")
      options.splitting = true;
    if (name == "eod-token" && value.empty())
      return "--eod-token needs the text of a token";
  }
  if (options.inputs.empty())
    return "needs at least one --input FILE";
  if (options.outputPrefix.empty())
    return "needs --output-prefix PREFIX";
  if (options.tokenizer.empty() == options.trainTokenizer.empty())
    return "needs either --tokenizer MODEL or --train-tokenizer MODEL_PREFIX";
  if (!options.tokenizer.empty() && !vocabulary.empty())
    return "--vocab-size applies to --train-tokenizer, not to an existing --tokenizer";
  if (!options.tokenizer.empty() && isDirectory(options.tokenizer)) {
    options.modelDirectory = options.tokenizer;
    options.tokenizer = tokenizerIn(options.modelDirectory);
    if (options.tokenizer.empty())
      return "--tokenizer " + options.modelDirectory +
             " is a directory without a tokenizer.model, tokenizer.json or "
             "original/tokenizer.model";
  }
  // (A tokenizer that cannot be read is reported as such later.)
  if (!options.eodToken.empty() &&
      (options.tokenizer.empty() ||
       (isRegularFile(options.tokenizer) && !isByteLevel(options.tokenizer))))
    return "--eod-token applies to a --tokenizer tokenizer.json or tiktoken file";
  if (!options.trainTokenizer.empty()) {
    if (vocabulary.empty())
      return "--train-tokenizer needs --vocab-size N";
    char *end = nullptr;
    errno = 0;
    long parsed = std::strtol(vocabulary.c_str(), &end, 10);
    if (*end != '\0' || errno != 0 || parsed <= 0 || parsed > (1L << 30))
      return "--vocab-size must be a positive integer, got '" + vocabulary + "'";
    options.vocabularySize = static_cast<int>(parsed);
  }
  return "";
}

std::string withCommas(uint64_t n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0)
      out += ',';
    out += digits[i];
  }
  return out;
}

/// "1 document", "12,345 documents".
std::string counted(uint64_t n, const std::string &noun) {
  return withCommas(n) + " " + noun + (n == 1 ? "" : "s");
}

/// SentencePiece's messages start with the source line and the failed condition,
/// "./src/trainer_interface.cc(580) [(a) <= (b)] Vocabulary size is ...": keep what
/// follows, which says what is wrong in words.
std::string sentencePieceReason(const sentencepiece::util::Status &status,
                                const std::string &whenSilent) {
  std::string message = status.message();
  size_t condition = message.find(") [");
  size_t reason = condition == std::string::npos ? condition : message.find("] ", condition);
  if (reason != std::string::npos)
    message = message.substr(reason + 2);
  return message.empty() ? whenSilent : message;
}

/// The lines of one file, without their line ends.
class LineReader {
public:
  /// A line longer than this is refused: a sparse file of zeros is one endless line.
  static constexpr size_t kLineBytes = size_t{256} << 20;

  LineReader() = default;
  LineReader(const LineReader &) = delete;
  LineReader &operator=(const LineReader &) = delete;
  ~LineReader() {
    if (fd_ >= 0)
      ::close(fd_);
  }

  /// A regular file only: the input is read twice (counted, then encoded), which a pipe
  /// cannot be, and a device such as /dev/zero never ends.
  bool open(const std::string &path, std::string &error) {
    path_ = path;
    uint64_t size = 0;
    if (mt::Status s = mt::openRegularFile(path, fd_, size); !s.ok()) {
      error = s.message();
      return false;
    }
    buffer_.resize(size_t{1} << 20);
    return true;
  }

  /// False at the end of the file, on a read error, or at a line longer than kLineBytes;
  /// error() tells which.
  bool next(std::string &line) {
    line.clear();
    bool any = false;
    const uint64_t lineStart = bytes_;
    for (;;) {
      if (at_ == filled_ && !fill())
        return error_.empty() && any;
      const char *start = buffer_.data() + at_;
      const char *newline = static_cast<const char *>(std::memchr(start, '\n', filled_ - at_));
      const size_t n = newline ? static_cast<size_t>(newline - start) : filled_ - at_;
      if (line.size() + n > kLineBytes) {
        error_ = mt::cat(path_, ": the line from byte ", lineStart, " is longer than ", kLineBytes,
                         " bytes");
        return false;
      }
      line.append(start, n);
      any = true;
      const size_t used = n + (newline ? 1 : 0);
      at_ += used;
      bytes_ += used;
      if (newline)
        return true;
    }
  }

  const std::string &error() const { return error_; }
  uint64_t bytes() const { return bytes_; }

private:
  /// The next bytes into the buffer; false at the end of the file or on an error.
  bool fill() {
    ssize_t n;
    do
      n = ::read(fd_, buffer_.data(), buffer_.size());
    while (n < 0 && errno == EINTR);
    if (n < 0)
      error_ = "cannot read " + path_ + ": " + std::strerror(errno);
    at_ = 0;
    filled_ = n > 0 ? static_cast<size_t>(n) : 0;
    return n > 0;
  }

  std::string path_, error_;
  int fd_ = -1;
  std::vector<char> buffer_;
  size_t at_ = 0, filled_ = 0;
  uint64_t bytes_ = 0; // consumed, line ends included
};

/// Whether `line` is the separator (ignoring a CRLF line end's '\r').
bool isSeparator(const Options &options, const std::string &line) {
  if (!options.splitting)
    return false;
  std::string_view text = line;
  if (!text.empty() && text.back() == '\r')
    text.remove_suffix(1);
  return text == options.splitOn;
}

bool isBlank(const std::string &text) {
  return text.find_first_not_of(" \t\r\n\f\v") == std::string::npos;
}

/// Calls `onDocument` with each document of `path`: its lines joined by '\n', up to a
/// separator line or the end of the file. Blank documents are skipped.
bool forEachDocument(const Options &options, const std::string &path,
                     const std::function<bool(const std::string &)> &onDocument,
                     std::string &error) {
  LineReader reader;
  if (!reader.open(path, error))
    return false;
  std::string line, document;
  bool started = false;
  auto emit = [&] {
    bool ok = isBlank(document) || onDocument(document);
    document.clear();
    started = false;
    return ok;
  };
  while (reader.next(line)) {
    if (isSeparator(options, line)) {
      if (!emit())
        return false;
      continue;
    }
    if (started)
      document += '\n';
    document += line;
    started = true;
  }
  error = reader.error();
  if (!error.empty())
    return false;
  if (reader.bytes() == 0) {
    error = path + " is empty";
    return false;
  }
  return emit();
}

/// The trainer's sentences: every non-blank line of the inputs except separators.
class TrainingLines : public sentencepiece::SentenceIterator {
public:
  explicit TrainingLines(const Options &options) : options_(options) { advance(); }
  bool done() const override { return done_; }
  void Next() override { advance(); }
  const std::string &value() const override { return line_; }
  sentencepiece::util::Status status() const override {
    if (error_.empty())
      return sentencepiece::util::Status();
    return sentencepiece::util::Status(sentencepiece::util::StatusCode::kDataLoss, error_);
  }

private:
  void advance() {
    while (!done_) {
      if (reader_ && reader_->next(line_)) {
        if (!isBlank(line_) && !isSeparator(options_, line_))
          return;
        continue;
      }
      if (reader_) {
        error_ = reader_->error();
        if (!error_.empty()) {
          done_ = true;
          return;
        }
      }
      if (nextInput_ == options_.inputs.size()) {
        done_ = true;
        return;
      }
      reader_ = std::make_unique<LineReader>();
      if (!reader_->open(options_.inputs[nextInput_++], error_))
        done_ = true;
    }
  }

  const Options &options_;
  std::unique_ptr<LineReader> reader_;
  size_t nextInput_ = 0;
  std::string line_, error_;
  bool done_ = false;
};

/// Trains a BPE model that encodes any text: byte fallback covers every character
/// the training text lacks, and identity normalization keeps whitespace and line
/// breaks as they are, so decoding gives back the text exactly.
bool trainTokenizer(const Options &options, std::string &error) {
  const std::unordered_map<std::string, std::string> settings = {
      {"model_type", "bpe"},
      {"vocab_size", std::to_string(options.vocabularySize)},
      {"byte_fallback", "true"},
      {"character_coverage", "1.0"},
      {"normalization_rule_name", "identity"},
      {"remove_extra_whitespaces", "false"},
      {"pad_id", "-1"},
      {"unk_id", "0"},
      {"bos_id", "1"},
      {"eos_id", "2"},
      // A sample of the lines is enough for a small vocabulary, and keeps training to
      // seconds on a large corpus.
      {"input_sentence_size", "200000"},
      {"shuffle_input_sentence", "true"},
      {"minloglevel", "2"},
  };
  // The sample, and so the model, is the same on every run.
  sentencepiece::SetRandomGeneratorSeed(1);
  TrainingLines lines(options);
  // The model comes back as bytes, written here as every output is (AtomicFile: never
  // through a link planted at its name).
  std::string model;
  sentencepiece::util::Status trained =
      sentencepiece::SentencePieceTrainer::Train(settings, &lines, &model);
  if (!trained.ok()) {
    error = "cannot train a tokenizer of " + std::to_string(options.vocabularySize) +
            " pieces on the inputs: " + sentencePieceReason(trained, "no reason given");
    return false;
  }
  if (mt::Status s =
          mt::AtomicFile::writeWhole(options.trainTokenizer + ".model", model.data(), model.size());
      !s.ok()) {
    error = s.message();
    return false;
  }
  return true;
}

/// What encodes the documents: a SentencePiece model, or byte-level BPE.
struct Encoder {
  std::function<bool(const std::string &, std::vector<int32_t> &, std::string &)> encode;
  int64_t vocabularySize = 0;
  int32_t endOfDocument = -1;
};

/// A SentencePiece model, ending documents with its end-of-sequence piece.
bool loadSentencePiece(const std::string &path, sentencepiece::SentencePieceProcessor &model,
                       Encoder &encoder, std::string &error, const char *what = "tokenizer") {
  std::string bytes;
  if (mt::Status s = mt::readRegularFile(path, mt::limits::kTokenizerBytes, "a tokenizer", bytes);
      !s.ok()) {
    error = s.message();
    return false;
  }
  if (sentencepiece::util::Status loaded = model.LoadFromSerializedProto(bytes); !loaded.ok()) {
    error = std::string("cannot load ") + what + " " + path + ": " +
            sentencePieceReason(loaded, "not a SentencePiece model");
    return false;
  }
  encoder.vocabularySize = model.GetPieceSize();
  encoder.endOfDocument = model.eos_id();
  if (encoder.endOfDocument < 0) {
    error = "tokenizer " + path + " has no end-of-sequence piece to end documents with";
    return false;
  }
  encoder.encode = [&model, pieces = std::vector<int>()](const std::string &text,
                                                         std::vector<int32_t> &ids,
                                                         std::string &why) mutable {
    if (sentencepiece::util::Status s = model.Encode(text, &pieces); !s.ok()) {
      why = sentencePieceReason(s, "no reason given");
      return false;
    }
    ids.assign(pieces.begin(), pieces.end());
    return true;
  };
  return true;
}

/// The end-of-sequence token a model's tokenizer_config.json names (the model directory's,
/// where --tokenizer named one, else the one beside the tokenizer), or "".
std::string configuredEndOfSequence(const Options &options) {
  const std::string &tokenizer = options.tokenizer;
  const size_t slash = tokenizer.find_last_of('/');
  const std::string path =
      !options.modelDirectory.empty()
          ? options.modelDirectory + "/tokenizer_config.json"
          : (slash == std::string::npos ? "" : tokenizer.substr(0, slash + 1)) +
                "tokenizer_config.json";
  std::string text;
  if (::access(path.c_str(), F_OK) != 0)
    return "";
  if (mt::Status s =
          mt::readRegularFile(path, mt::limits::kConfigBytes, "a tokenizer_config.json", text);
      !s.ok()) {
    std::fprintf(stderr, "mtdata: warning: %s; its eos_token is not used\n", s.message().c_str());
    return "";
  }
  const nlohmann::json config = nlohmann::json::parse(text, nullptr, false);
  if (config.is_discarded() || !config.is_object() || !config.contains("eos_token"))
    return "";
  const nlohmann::json &eos = config["eos_token"];
  if (eos.is_string())
    return eos.get<std::string>();
  if (eos.is_object() && eos.contains("content") && eos["content"].is_string())
    return eos["content"].get<std::string>();
  return "";
}

/// A tokenizer.json's or tiktoken file's byte-level BPE, ending documents with the token
/// --eod-token names, else the eos_token of tokenizer_config.json beside it, else the
/// first it has of <|endoftext|> (GPT-2), <|end_of_text|> (LLaMA 3) and </s>.
bool openByteBpe(const Options &options, Encoder &encoder, std::string &error) {
  auto bpe = std::make_shared<mt::ByteBpe>();
  if (mt::Status s = mt::ByteBpe::open(options.tokenizer, *bpe); !s.ok()) {
    error = s.message();
    return false;
  }
  std::vector<std::string> names;
  if (!options.eodToken.empty())
    names = {options.eodToken};
  else if (std::string configured = configuredEndOfSequence(options); !configured.empty())
    names = {configured};
  else
    names = {"<|endoftext|>", "<|end_of_text|>", "</s>"};
  for (const std::string &name : names)
    if (std::optional<int32_t> id = bpe->addedToken(name)) {
      encoder.endOfDocument = *id;
      break;
    }
  if (encoder.endOfDocument < 0) {
    error = options.tokenizer + " has no added token " + names.front() +
            (names.size() > 1 ? " (nor " + names[1] + ", " + names[2] + ")" : "") +
            " to end documents with: name one with --eod-token";
    return false;
  }
  encoder.vocabularySize = bpe->vocabularySize();
  encoder.encode = [bpe](const std::string &text, std::vector<int32_t> &ids, std::string &why) {
    if (mt::Status s = bpe->encode(text, ids); !s.ok()) {
      why = s.message();
      return false;
    }
    return true;
  };
  return true;
}

int run(int argc, char **argv);

} // namespace

int main(int argc, char **argv) {
  try {
    return run(argc, argv);
  } catch (const std::bad_alloc &) {
    return inputError("out of memory");
  }
}

namespace {

int run(int argc, char **argv) {
  Options options;
  std::string error = parseArgs(argc, argv, options);
  if (options.help) {
    std::cout << kUsage;
    return 0;
  }
  if (!error.empty())
    return usageError(error);

  // Every input is read through before anything is trained or written, so that a
  // missing, unreadable or empty file is reported at once.
  for (const std::string &path : options.inputs) {
    uint64_t documents = 0;
    auto count = [&](const std::string &) {
      ++documents;
      return true;
    };
    if (!forEachDocument(options, path, count, error))
      return inputError(error);
    if (documents == 0)
      return inputError(path + " has no text, only blank lines" +
                        (options.splitting ? " and separators '" + options.splitOn + "'" : ""));
  }

  Encoder encoder;
  sentencepiece::SentencePieceProcessor tokenizer; // what encoder.encode calls, when used
  const bool training = !options.trainTokenizer.empty();
  const bool byteLevel = !training && isByteLevel(options.tokenizer);
  const std::string modelPath = training ? options.trainTokenizer + ".model" : options.tokenizer;
  if (byteLevel) {
    if (!openByteBpe(options, encoder, error))
      return inputError(error);
  } else if (training) {
    encoder.vocabularySize = options.vocabularySize;
    // Whether the model can be written, before the work: a temporary beside it, dropped.
    mt::AtomicFile probe;
    if (mt::Status s = mt::AtomicFile::create(modelPath, probe); !s.ok())
      return inputError(s.message());
  } else if (!loadSentencePiece(modelPath, tokenizer, encoder, error)) {
    return inputError(error);
  }

  // Opened before training, so that an unwritable output fails before the wait.
  mt::IndexedDatasetWriter writer;
  const mt::MegatronDType dtype = mt::tokenDTypeForVocabulary(encoder.vocabularySize);
  mt::Status opened = mt::IndexedDatasetWriter::open(options.outputPrefix, dtype, writer);
  if (!opened.ok())
    return inputError(opened.message());

  if (training) {
    if (!trainTokenizer(options, error) ||
        !loadSentencePiece(modelPath, tokenizer, encoder, error, "the trained tokenizer"))
      return inputError(error);
    if (encoder.vocabularySize != options.vocabularySize)
      return inputError("the trained tokenizer " + modelPath + " has " +
                        std::to_string(encoder.vocabularySize) + " pieces, not the " +
                        std::to_string(options.vocabularySize) + " asked for");
  }

  std::vector<int32_t> tokens;
  for (const std::string &path : options.inputs) {
    auto encode = [&](const std::string &document) {
      tokens.clear();
      if (!encoder.encode(document, tokens, error)) {
        error = "cannot encode a document of " + path + ": " + error;
        return false;
      }
      tokens.push_back(encoder.endOfDocument);
      mt::Status added = writer.addDocument(tokens);
      if (!added.ok())
        error = added.message();
      return added.ok();
    };
    if (!forEachDocument(options, path, encode, error))
      return inputError(error);
  }
  mt::Status finished = writer.finish();
  if (!finished.ok())
    return inputError(finished.message());

  std::cout << "mtdata: " << counted(writer.numDocuments(), "document") << ", "
            << counted(writer.numTokens(), "token") << ", vocabulary "
            << withCommas(static_cast<uint64_t>(encoder.vocabularySize)) << " -> "
            << (training ? modelPath + ", " : "") << options.outputPrefix << ".bin, "
            << options.outputPrefix << ".idx (" << mt::dtypeName(dtype) << ")\n";
  return 0;
}

} // namespace
