// mtrun: executes a plan on this rank — trains the model it describes.
#include "backends/Backend.h"
#include "backends/cpu/CpuThreads.h"
#include "comm/Comm.h"
#include "core/InputFile.h"
#include "data/TokenStream.h"
#include "exec/Executor.h"
#include "plan/PlanReader.h"
#include "train/Trainer.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

namespace {

constexpr const char *kUsage = R"(usage:
  mtrun [-n RANKS] PLAN --data PREFIX --steps N [options]

  -n RANKS                  start RANKS local processes through mpirun (a plan for
                            several ranks also runs under an outside mpirun or srun)

  --data PREFIX             Megatron indexed dataset PREFIX.bin / PREFIX.idx (mtdata)
  --data W1 P1 W2 P2 ...    a blend (Megatron's --data-path with weights): each sample
                            from the dataset furthest behind its share W/(W1+W2+...),
                            as Megatron's blend picks it (a prefix that reads as a
                            number: ./2024)
  --data P1 P2 ...          a blend weighted by each dataset's samples (Megatron's
                            --data-path without weights), up to the next flag or file
  --data-args-path FILE     --data's words from FILE, separated by white space (a blend
                            of too many datasets for a command line)
  --train-data-path ...     each split read whole from datasets of its own, each a
  --valid-data-path ...     prefix or a blend as --data's (Megatron's flags: in place of
  --test-data-path ...      --data and --split)
  --per-split-data-args-path FILE   the three from a JSON object: {"train": [words],
                            "valid": [...], "test": [...]} (or a string of words each)
  --mock-data               synthetic documents in place of data, as Megatron's (for a
                            benchmark without a dataset: lengths from a fixed generator,
                            each 1, 2, ..., then the vocabulary's last id)
  --split A,B,C             train on the first A/(A+B+C) of the documents, hold out the
                            next B/(A+B+C) for validation and the rest for test, cut
                            as Megatron cuts them (default: train on all of them; each
                            dataset of a blend cut alike)
  --eval-interval K         with held-out documents (--split, --valid-data-path or
                            --test-data-path): the validation loss every K steps and after
                            the last (default 1000; 0: after the last only), and the
                            test loss after the last
  --eval-iters N            global batches each evaluation reads: the same N every
                            time, forward only, without dropout (default 100; 0: none)
  --steps N                 optimizer steps (Megatron: --train-iters)
  --train-samples N         or a run of N samples: N / global batch steps, the
                            schedule's lengths counted in samples (--lr-warmup-samples,
                            --lr-decay-samples, --lr-wsd-decay-samples), as Megatron's
  --seed S                  parameter init, dropout and data order (default 1234)
  --lr X, --min-lr X        peak and final learning rate (default 6e-4, 0)
  --warmup-steps N          linear warm-up (Megatron: --lr-warmup-iters), or over
                            --lr-warmup-fraction F of the decay steps, from
                            --lr-warmup-init X (default 0)
  --lr-decay cosine|linear|constant|inverse-square-root|WSD   (Megatron: --lr-decay-style)
  --lr-decay-steps N        (Megatron: --lr-decay-iters; default: all steps)
  --lr-wsd-decay-steps N    WSD: the last N decay steps anneal to --min-lr, the others
                            keep the peak (Megatron: --lr-wsd-decay-iters), in
  --lr-wsd-decay-style exponential|linear|cosine|minus_sqrt   (default exponential)
  --adam-beta1 X, --adam-beta2 X, --adam-eps X, --weight-decay X
  --weight-decay-incr-style constant|linear|cosine   weight decay from
                            --start-weight-decay X to --end-weight-decay X over the run
                            (default constant: --weight-decay's)
  --clip-grad X             global gradient-norm clipping (0: off; default 1.0)
  --save DIR, --save-every K   checkpoint to DIR every K steps and at the end
                            (Megatron: --save-interval)
  --load DIR                resume from DIR's latest checkpoint (or DIR/iter_N's); with
                            --save DIR (the same DIR), start fresh while it holds none
                            (auto-resume)
  --exit-interval K         end the run after a step that is a multiple of K (saved
                            first with --save; Megatron's flags, as the two below)
  --exit-duration-in-mins M end the run after the first step to end more than M minutes
                            after launch on any rank (saved first with --save)
  --exit-signal-handler     catch --exit-signal (SIGTERM, the default; SIGINT, SIGHUP,
                            SIGUSR1, SIGUSR2): the run ends after the step it reaches any
                            rank in (saved first with --save), exiting 0, as for a
                            scheduler's notice (sbatch --signal=TERM@120; under mpirun
                            or mtrun -n, SIGUSR1 or SIGUSR2: mpirun follows a SIGTERM
                            it forwards with SIGKILL within seconds)
  --override-opt-param-scheduler   resume with this run's learning-rate and weight-decay
                            schedule where it is not the checkpoint's (which is refused
                            otherwise, naming each difference, as Megatron refuses it)
  --keep-checkpoints K      keep the newest K checkpoints in the save directory (default
                            0: all)
  --checkpoint-buffer-mib N host memory each rank stages checkpoint reads and writes in
                            (default 256)
  --collective-timeout S    a rank that waits S seconds for another (a collective, a
                            pipeline message) ends the job, naming the step, what it
                            waited in and the ranks that stopped (default 300; 0: off)
  --async-save              training goes on while a checkpoint is written (each rank
                            first copies its part to host memory); committed once every
                            rank's write has ended, at the latest by the next save or
                            the end of training
  --log-every K             progress line every K steps (Megatron: --log-interval), its
                            tok/s over the steps since the line before
  --metrics FILE            append "step N loss X lr X grad_norm X" per step
  --tensorboard-dir DIR     TensorBoard event files in DIR (`tensorboard --logdir DIR`):
                            per step lm loss, learning-rate, grad-norm, loss-scale (fp16),
                            iteration-time (s), throughput (model TFLOP/s per GPU) and
                            mem-allocated-bytes, mem-max-allocated-bytes (and as
                            mem-reserved-bytes the device's whole use, as its driver says,
                            where Megatron's is its allocator's reserve) as Megatron tags
                            them, and tokens-per-second; with --split, lm loss
                            validation (test) and its ppl; with --peak-tflops, mfu
  --peak-tflops X           the device's dense peak TFLOP/s in the plan's precision (989.4
                            for an H100 or H200 in bf16): the log and TensorBoard give the
                            model FLOP utilisation beside the TFLOP/s per GPU
  --trace FILE              Chrome-trace / Perfetto timeline (FILE.rank<N>.json per rank
                            when there are several)
  --profile                 after training, rank 0's device time per step by opcode and
                            its slowest instructions (each instruction timed by the
                            backend: CUDA events, or the host's clock on the CPU; the
                            host then waits for each program, so steps run a little
                            slower)
  --initial-loss-scale X    fp16 plans: dynamic loss scaling's first scale (default
                            2^32), --min-loss-scale X (1), --loss-scale-window N good
                            steps before it doubles (1000), --hysteresis N overflows
                            before it halves (2)
  --backend cpu|cuda        the device to run on (default: cuda when a GPU is present;
                            each rank takes GPU local-rank mod GPUs)
)";

int usageError(const std::string &message) {
  std::fprintf(stderr, "mtrun: %s\n%s", message.c_str(), kUsage);
  return 2;
}

/// Megatron's flag names map onto ours.
const std::map<std::string, std::string> kAliases = {
    {"train-iters", "steps"},
    {"lr-warmup-iters", "warmup-steps"},
    {"lr-decay-style", "lr-decay"},
    {"lr-decay-iters", "lr-decay-steps"},
    {"lr-wsd-decay-iters", "lr-wsd-decay-steps"},
    {"save-interval", "save-every"},
    {"log-interval", "log-every"},
    {"data-path", "data"},
    {"override-opt_param-scheduler", "override-opt-param-scheduler"}};
/// Megatron's flags that give each split datasets of its own.
constexpr const char *kSplitDataFlags[3] = {"train-data-path", "valid-data-path", "test-data-path"};

// clang-format off
const std::set<std::string> kFlags = {
    // the data
    "data", "data-args-path", "train-data-path", "valid-data-path", "test-data-path",
    "per-split-data-args-path", "split", "eval-interval", "eval-iters",
    // the run's length and its schedules
    "steps", "train-samples", "seed", "lr", "min-lr", "warmup-steps", "lr-warmup-samples",
    "lr-warmup-init", "lr-warmup-fraction", "lr-decay", "lr-decay-steps", "lr-decay-samples",
    "lr-wsd-decay-steps", "lr-wsd-decay-samples", "lr-wsd-decay-style", "weight-decay",
    "weight-decay-incr-style", "start-weight-decay", "end-weight-decay",
    "adam-beta1", "adam-beta2", "adam-eps", "clip-grad",
    "initial-loss-scale", "min-loss-scale", "loss-scale-window", "hysteresis",
    // checkpoints and exits
    "save", "save-every", "load", "keep-checkpoints", "checkpoint-buffer-mib",
    "exit-interval", "exit-duration-in-mins", "exit-signal", "collective-timeout",
    // what it reports, and where it runs
    "log-every", "metrics", "trace", "tensorboard-dir", "peak-tflops", "backend"};
// clang-format on
/// Flags that take no value.
const std::set<std::string> kSwitches = {"async-save", "profile", "exit-signal-handler",
                                         "override-opt-param-scheduler", "mock-data"};

/// This process's rank among those on its machine, from the launcher's environment.
int localRank() {
  for (const char *name : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"})
    if (const char *value = std::getenv(name))
      return std::atoi(value);
  return 0;
}

/// Ranks this process runs among, from the launcher's environment.
int worldSize() {
  for (const char *name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"})
    if (const char *value = std::getenv(name))
      return std::atoi(value);
  return 1;
}

/// `mtrun -n N ...` becomes `mpirun -n N mtrun ...` (root and oversubscription allowed:
/// one machine, as many ranks as asked for).
int launchRanks(int ranks, int argc, char **argv) {
  // Unbound: Open MPI would bind each of two ranks to one core and leave the rest idle;
  // each rank takes its share of the machine's CPUs instead (useCpuThreads).
  std::vector<std::string> args = {"mpirun", "-n", std::to_string(ranks), "--bind-to", "none",
                                   "--oversubscribe", "--allow-run-as-root",
                                   "--mca", "btl", "self,vader", "/proc/self/exe"};
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n > 0)
    args.back() = std::string(self, n);
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "-n") {
      ++i;
      continue;
    }
    args.push_back(arg);
  }
  std::vector<char *> raw;
  for (std::string &a : args)
    raw.push_back(a.data());
  raw.push_back(nullptr);
  execvp("mpirun", raw.data());
  std::fprintf(stderr, "mtrun: cannot start mpirun: %s\n", std::strerror(errno));
  return 1;
}

/// The command line: the plan, the flags by our names (a switch's value is "1"), and
/// -n's ranks (0 without it).
struct CommandLine {
  std::string planPath;
  std::map<std::string, std::string> flags;
  std::map<std::string, std::string> spelled; // a flag given by another name: that name
  int ranks = 0;
};

/// Reads the command line into `out`: -1 to go on, else the exit code (0 after --help, 2
/// after a usage error).
int parseCommandLine(int argc, char **argv, CommandLine &out) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (arg == "-n") {
      if (i + 1 >= argc || (out.ranks = std::atoi(argv[++i])) <= 0)
        return usageError("-n needs a positive number of ranks");
      continue;
    }
    if (arg.rfind("-", 0) != 0) {
      if (!out.planPath.empty())
        return usageError("more than one plan given ('" + out.planPath + "' and '" + arg + "')");
      out.planPath = arg;
      continue;
    }
    if (arg.find_first_not_of('-') == std::string::npos)
      return usageError("'" + arg + "' names no flag");
    std::string name = arg.substr(arg.find_first_not_of('-')), value;
    const size_t eq = name.find('=');
    const bool inline_ = eq != std::string::npos;
    if (inline_) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    if (auto alias = kAliases.find(name); alias != kAliases.end())
      out.spelled[name = alias->second] = "--" + alias->first;
    if (kSwitches.count(name)) {
      if (inline_)
        return usageError("--" + name + " takes no value");
      out.flags[name] = "1";
      continue;
    }
    if (!kFlags.count(name))
      return usageError("unknown flag '" + arg + "'");
    if (!inline_ && i + 1 >= argc)
      return usageError("flag '" + arg + "' needs a value");
    if (!inline_)
      value = argv[++i];
    // A blend's words, a line each: a number followed by a word that is no flag is a
    // weight and its prefix, and more pairs follow while a number comes next. Prefixes
    // alone follow each other until a flag or a file (the plan: a prefix names PREFIX.idx
    // and PREFIX.bin, not a file of its own). (A prefix that reads as a number: ./2024.)
    auto number = [](const char *word) {
      char *end = nullptr;
      return word[0] && (std::strtod(word, &end), *end == '\0');
    };
    auto word = [&](int at) { return at < argc && argv[at][0] != '-'; };
    auto prefix = [&](int at) {
      struct stat file;
      return word(at) && (stat(argv[at], &file) != 0 || !S_ISREG(file.st_mode) ||
                          access((argv[at] + std::string(".idx")).c_str(), F_OK) == 0);
    };
    const bool data =
        name == "data" || std::count(std::begin(kSplitDataFlags), std::end(kSplitDataFlags), name);
    if (data && number(value.c_str()) && word(i + 1)) {
      value += '\n' + std::string(argv[++i]);
      for (; i + 1 < argc && number(argv[i + 1]); i += 2) {
        if (!word(i + 2))
          return usageError(arg.substr(0, arg.find('=')) + ": the weight " + argv[i + 1] +
                            " has no prefix after it");
        value += '\n' + std::string(argv[i + 1]) + '\n' + argv[i + 2];
      }
    }
    while (data && prefix(i + 1)) // more prefixes (or a weight left out)
      value += '\n' + std::string(argv[++i]);
    out.flags[name] = value;
  }
  if (out.planPath.empty()) {
    auto several = std::find_if(out.flags.begin(), out.flags.end(), [](const auto &flag) {
      return flag.second.find('\n') != std::string::npos;
    });
    return usageError(several == out.flags.end()
                          ? "no plan given"
                          : "no plan given (the words after --" + several->first +
                                ", up to a flag or an existing file, were read as its "
                                "prefixes)");
  }
  if (!(out.flags.count("data") || out.flags.count("data-args-path") ||
        out.flags.count("per-split-data-args-path") || out.flags.count("mock-data") ||
        std::any_of(std::begin(kSplitDataFlags), std::end(kSplitDataFlags),
                    [&](const char *name) { return out.flags.count(name); })) ||
      !(out.flags.count("steps") || out.flags.count("train-samples")))
    return usageError("--data (or --data-args-path, --train-data-path, "
                      "--per-split-data-args-path, --mock-data) and --steps (or --train-samples) "
                      "are required");
  return -1;
}

/// The flags' values, by name: a missing one is its fallback, a bad number throws
/// std::invalid_argument naming its flag.
struct FlagValues {
  const std::map<std::string, std::string> &flags, &spelled;

  /// The flag as the command line names it: "--" and its name, or the alias given.
  std::string as(const std::string &name) const {
    auto it = spelled.find(name);
    return it == spelled.end() ? "--" + name : it->second;
  }
  std::string text(const char *name, const std::string &fallback) const {
    auto it = flags.find(name);
    return it == flags.end() ? fallback : it->second;
  }
  double number(const char *name, double fallback) const {
    auto it = flags.find(name);
    if (it == flags.end())
      return fallback;
    size_t used = 0;
    double v = 0;
    try {
      v = std::stod(it->second, &used);
    } catch (const std::exception &) {
    }
    if (used == 0 || used != it->second.size() || !std::isfinite(v))
      throw std::invalid_argument(name);
    return v;
  }
  int64_t integer(const char *name, int64_t fallback) const {
    auto it = flags.find(name);
    if (it == flags.end())
      return fallback;
    size_t used = 0;
    long long v = -1;
    try {
      v = std::stoll(it->second, &used);
    } catch (const std::exception &) {
    }
    if (used == 0 || used != it->second.size() || v < 0)
      throw std::invalid_argument(name);
    return static_cast<int64_t>(v);
  }
};

/// Each split's own --data words, where given, and the name a message gives them.
struct SplitWords {
  std::array<std::optional<std::vector<std::string>>, 3> words;
  std::array<std::string, 3> names;
};

/// Megatron's --per-split-data-args-path: a JSON object whose "train", "valid" and
/// "test" are each a list of --data words (weights may be numbers) or one string of them
/// (null: none); "" or what is wrong with it.
std::string readSplitWords(const std::string &path, SplitWords &out) {
  std::string text;
  if (mt::Status s = mt::readRegularFile(path, mt::limits::kDataArgsBytes,
                                         "a JSON of each split's --data words", text);
      !s.ok())
    return "--per-split-data-args-path: " + s.message();
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error &e) { // its position only, never its text
    return mt::cat(path, ": not JSON (a syntax error at byte ", e.byte, ")");
  } catch (const nlohmann::json::exception &) { // a number past a double's range
    return path + ": not JSON mtrun reads (a number out of range)";
  }
  // Quoted where a scalar: dumping nests recurses, as deep as a hostile file makes them.
  auto quote = [](const nlohmann::json &value) {
    return value.is_object()  ? std::string("an object")
           : value.is_array() ? std::string("a list")
                              : value.dump().substr(0, 40);
  };
  static const char *const kKeys[] = {"train", "valid", "test"};
  if (!json.is_object())
    return path + ": not a JSON object (--per-split-data-args-path: {\"train\": [...], "
                  "\"valid\": [...], \"test\": [...]})";
  for (const auto &[key, value] : json.items())
    if (std::find(std::begin(kKeys), std::end(kKeys), key) == std::end(kKeys))
      return mt::cat(path, ": \"", key.substr(0, 40), "\" is not a split (\"train\", \"valid\" ",
                     "or \"test\")");
  for (int split = 0; split < 3; ++split) {
    auto it = json.find(kKeys[split]);
    if (it == json.end() || it->is_null())
      continue;
    std::vector<std::string> words;
    if (it->is_string()) {
      std::istringstream in(it->get<std::string>());
      for (std::string word; in >> word;)
        words.push_back(word);
    } else if (it->is_array()) {
      for (const nlohmann::json &word : *it) // a number only where a weight belongs
        if (word.is_string() || (word.is_number() && words.size() % 2 == 0))
          words.push_back(word.is_string() ? word.get<std::string>() : word.dump());
        else
          return mt::cat(path, ": \"", kKeys[split], "\" lists ", quote(word), " where ",
                         word.is_number() ? "a prefix belongs" : "a weight or a prefix belongs");
    } else {
      return mt::cat(path, ": \"", kKeys[split], "\" must be a list of --data words or a string ",
                     "of them, not ", quote(*it));
    }
    out.words[split] = std::move(words);
    out.names[split] = mt::cat("--per-split-data-args-path's \"", kKeys[split], "\"");
  }
  return "";
}

/// The data: --data's words (or --data-args-path's), or each split's own (their flags'
/// or --per-split-data-args-path's); false with `error` naming what is wrong.
bool dataConfig(const FlagValues &f, mt::TrainerConfig &config, std::string &error) {
  const std::map<std::string, std::string> &flags = f.flags;
  if (flags.count("mock-data")) {
    for (const char *other : {"data", "data-args-path", "per-split-data-args-path",
                              kSplitDataFlags[0], kSplitDataFlags[1], kSplitDataFlags[2]})
      if (flags.count(other)) {
        error = "--mock-data and " + f.as(other) + " both given: one or the other";
        return false;
      }
    config.mockData = true;
    return true;
  }
  auto words = [&](const char *name) {
    std::vector<std::string> out;
    if (auto it = flags.find(name); it != flags.end()) {
      std::istringstream lines(it->second);
      for (std::string word; std::getline(lines, word);)
        out.push_back(word);
    }
    return out;
  };
  std::vector<std::string> data = words("data");
  if (auto it = flags.find("data-args-path"); it != flags.end()) {
    if (!data.empty()) {
      error = f.as("data") + " and --data-args-path both given: one or the other";
      return false;
    }
    std::string list;
    mt::Status s =
        mt::readRegularFile(it->second, mt::limits::kDataArgsBytes, "a list of --data words", list);
    std::istringstream in(list);
    for (std::string word; s.ok() && in >> word;)
      data.push_back(word);
    if (s.ok() && data.empty())
      s = mt::Status::failure(it->second + ": no --data words in it");
    if (!s.ok()) {
      error = "--data-args-path: " + s.message();
      return false;
    }
  }
  SplitWords own;
  for (int split = 0; split < 3; ++split)
    if (flags.count(kSplitDataFlags[split])) {
      own.words[split] = words(kSplitDataFlags[split]);
      own.names[split] = std::string("--") + kSplitDataFlags[split];
    }
  const bool flagged = own.words[0] || own.words[1] || own.words[2];
  const bool listed = flags.count("per-split-data-args-path") > 0;
  const std::string dataFlag = flags.count("data") ? f.as("data") : "--data-args-path";
  if (listed)
    error = flagged ? "--per-split-data-args-path and --train-data-path (--valid-data-path, "
                      "--test-data-path) both given: one or the other"
            : !data.empty()
                ? dataFlag + " and --per-split-data-args-path both given: one or the other"
                : readSplitWords(flags.at("per-split-data-args-path"), own);
  if (!error.empty())
    return false;
  mt::Status s = mt::Status::success();
  if (!flagged && !listed)
    s = mt::parseDataPath(data, config.data);
  else if (!data.empty())
    error = dataFlag + " and each split's own data (--train-data-path, "
                       "--per-split-data-args-path) both given: one or the other";
  else if (!own.words[0])
    error = flagged ? "--valid-data-path and --test-data-path need --train-data-path"
                    : flags.at("per-split-data-args-path") + ": no \"train\" list";
  else if (flags.count("split"))
    error = "--split cuts --data's datasets, and each split's own (--train-data-path, "
            "--per-split-data-args-path) is read whole: one or the other";
  for (int split = 0; split < 3 && error.empty() && s.ok(); ++split)
    if (own.words[split]) {
      s = mt::parseDataPath(*own.words[split], config.splitData[split], own.names[split]);
      config.splitDataFlags[split] = own.names[split];
    }
  if (!s.ok())
    error = s.message();
  return error.empty();
}

/// The optimizer's settings and its schedules' (Megatron's flags, a run's lengths in
/// steps or, after --train-samples, in samples); "" or what is wrong with them.
std::string optimizerConfig(const FlagValues &f, mt::OptimizerConfig &o) {
  const bool samples = f.flags.count("train-samples") > 0;
  if (samples && f.flags.count("steps"))
    return f.as("steps") + " and --train-samples given: one or the other";
  // Each length in the unit the run is given in.
  static const char *const kLengths[][2] = {{"warmup-steps", "lr-warmup-samples"},
                                            {"lr-decay-steps", "lr-decay-samples"},
                                            {"lr-wsd-decay-steps", "lr-wsd-decay-samples"}};
  for (const auto &[steps, inSamples] : kLengths) {
    if (samples && f.flags.count(steps))
      return mt::cat("a run of --train-samples counts its schedule in samples: --", inSamples,
                     ", not ", f.as(steps));
    if (!samples && f.flags.count(inSamples))
      return mt::cat("--", inSamples, " counts the samples of a run of --train-samples; a run of ",
                     f.as("steps"), " counts steps: --", steps);
  }
  o.trainSamples = f.integer("train-samples", 0);
  if (samples && o.trainSamples == 0)
    return "--train-samples must be positive";
  o.lr = f.number("lr", o.lr);
  o.minLr = f.number("min-lr", o.minLr);
  o.warmup = f.integer(samples ? "lr-warmup-samples" : "warmup-steps", 0);
  o.decay = f.integer(samples ? "lr-decay-samples" : "lr-decay-steps", 0);
  o.decayStyle = f.text("lr-decay", o.decayStyle);
  o.warmupInit = f.number("lr-warmup-init", o.warmupInit);
  if (f.flags.count("lr-warmup-fraction"))
    o.warmupFraction = f.number("lr-warmup-fraction", 0);
  o.wsdDecay = f.integer(samples ? "lr-wsd-decay-samples" : "lr-wsd-decay-steps", -1);
  o.wsdDecayStyle = f.text("lr-wsd-decay-style", "");
  o.beta1 = f.number("adam-beta1", o.beta1);
  o.beta2 = f.number("adam-beta2", o.beta2);
  o.eps = f.number("adam-eps", o.eps);
  o.weightDecay = f.number("weight-decay", o.weightDecay);
  o.weightDecayIncrStyle = f.text("weight-decay-incr-style", o.weightDecayIncrStyle);
  if (f.flags.count("start-weight-decay"))
    o.startWeightDecay = f.number("start-weight-decay", 0);
  if (f.flags.count("end-weight-decay"))
    o.endWeightDecay = f.number("end-weight-decay", 0);
  o.clipGrad = f.number("clip-grad", o.clipGrad);
  return "";
}

/// Whether the signal --exit-signal-handler catches has arrived (on any of the
/// process's threads).
std::atomic<bool> exitSignalled{false};
static_assert(std::atomic<bool>::is_always_lock_free, "set in a signal handler");
extern "C" void catchExitSignal(int) { exitSignalled.store(true); }

/// Megatron's early exits (--exit-interval, --exit-duration-in-mins, and
/// --exit-signal-handler with --exit-signal, SIGTERM by default: it is caught from here
/// on); "" or what is wrong with them.
std::string exitConfig(const FlagValues &f, mt::TrainerConfig &config) {
  config.exitInterval = f.integer("exit-interval", 0);
  config.exitMinutes = f.number("exit-duration-in-mins", 0);
  if (config.exitMinutes < 0)
    return "--exit-duration-in-mins cannot be negative (0: no limit)";
  if (!f.flags.count("exit-signal-handler"))
    return f.flags.count("exit-signal")
               ? "--exit-signal names the signal --exit-signal-handler catches"
               : "";
  static const std::pair<const char *, int> kSignals[] = {{"SIGTERM", SIGTERM},
                                                          {"SIGINT", SIGINT},
                                                          {"SIGHUP", SIGHUP},
                                                          {"SIGUSR1", SIGUSR1},
                                                          {"SIGUSR2", SIGUSR2}};
  std::string name = f.text("exit-signal", "SIGTERM");
  if (name.rfind("SIG", 0) != 0)
    name = "SIG" + name;
  for (const auto &[known, number] : kSignals)
    if (name == known) {
      struct sigaction action = {};
      action.sa_handler = catchExitSignal;
      // What it interrupts goes on; a second signal ends the process as uncaught (a run
      // that is not stepping, loading say, can still be stopped).
      action.sa_flags = SA_RESTART | SA_RESETHAND;
      sigemptyset(&action.sa_mask);
      if (sigaction(number, &action, nullptr) != 0)
        return mt::cat("cannot catch ", name, ": ", std::strerror(errno));
      config.exitSignal = name;
      config.exitSignalled = [] { return exitSignalled.load(); };
      return "";
    }
  return "--exit-signal must be SIGTERM, SIGINT, SIGHUP, SIGUSR1 or SIGUSR2, not '" +
         f.text("exit-signal", "") + "'";
}

/// The trainer's settings from the flags (the rest keep their defaults); false with
/// `error` naming what is wrong.
bool trainerConfig(const CommandLine &line, mt::TrainerConfig &config, std::string &error) {
  const std::map<std::string, std::string> &flags = line.flags;
  const FlagValues f{flags, line.spelled};
  if (!dataConfig(f, config, error))
    return false;
  const bool heldOut =
      flags.count("split") || !config.splitData[1].empty() || !config.splitData[2].empty();
  try {
    config.steps = f.integer("steps", 0);
    config.seed = static_cast<uint64_t>(f.integer("seed", 1234));
    config.saveDir = f.text("save", "");
    config.loadDir = f.text("load", "");
    config.saveEvery = f.integer("save-every", 0);
    config.checkpoint.keep = static_cast<int>(f.integer("keep-checkpoints", 0));
    config.checkpoint.stagingBytes =
        static_cast<size_t>(std::max<int64_t>(1, f.integer("checkpoint-buffer-mib", 256))) << 20;
    config.checkpoint.async = flags.count("async-save") > 0;
    config.overrideSchedule = flags.count("override-opt-param-scheduler") > 0;
    config.collectiveTimeout = f.number("collective-timeout", config.collectiveTimeout);
    config.logEvery = f.integer("log-every", 1);
    config.metricsPath = f.text("metrics", "");
    config.tensorboardDir = f.text("tensorboard-dir", "");
    config.peakTflops = f.number("peak-tflops", 0);
    config.tracePath = f.text("trace", "");
    if (error = optimizerConfig(f, config.optimizer); !error.empty())
      return false;
    if (error = exitConfig(f, config); !error.empty())
      return false;
    mt::LossScaler &scaler = config.lossScaler;
    scaler.scale = f.number("initial-loss-scale", scaler.scale);
    scaler.minScale = f.number("min-loss-scale", scaler.minScale);
    scaler.window = f.integer("loss-scale-window", scaler.window);
    scaler.hysteresis = scaler.hysteresisLeft = f.integer("hysteresis", scaler.hysteresis);
    if (heldOut) { // Megatron's defaults
      config.evalInterval = f.integer("eval-interval", 1000);
      config.evalIters = f.integer("eval-iters", 100);
    }
  } catch (const std::exception &e) {
    error = std::string("bad number for --") + e.what();
    return false;
  }
  const bool evaluates = flags.count("eval-interval") || flags.count("eval-iters");
  if (auto split = flags.find("split"); split != flags.end()) {
    if (mt::Status s = mt::parseSplit(split->second, config.split); !s.ok()) {
      error = s.message();
      return false;
    }
    if (evaluates && config.evalIters > 0 && config.split[1] == 0 && config.split[2] == 0) {
      error = "--split " + split->second + " holds out no documents to evaluate";
      return false;
    }
  } else if (evaluates && !heldOut) {
    error = "--eval-interval and --eval-iters evaluate held-out documents: name them with "
            "--split (as in 949,50,1), or give --valid-data-path (or a \"valid\" list in "
            "--per-split-data-args-path)";
    return false;
  }
  const mt::LossScaler &scaler = config.lossScaler;
  if (config.peakTflops < 0)
    error = "--peak-tflops cannot be negative (0: no MFU)";
  else if (!(scaler.minScale > 0) || scaler.scale < scaler.minScale || scaler.window < 1 ||
           scaler.hysteresis < 1)
    error = "loss scaling needs 0 < --min-loss-scale <= --initial-loss-scale, "
            "--loss-scale-window >= 1 and --hysteresis >= 1";
  else
    error = mt::scheduleError(config.optimizer, config.steps);
  return error.empty();
}

/// The plan's grid, and as the messages spell it: "tp 2, dp 1" (cp and pp only when used).
mt::GridShape gridShape(const mt::plan::Grid &grid) {
  return {grid.tp(), grid.cp(), grid.dp(), grid.pp(), grid.ep()};
}
std::string gridText(const mt::plan::Grid &grid) {
  std::string text = "tp " + std::to_string(grid.tp()) + ", dp " + std::to_string(grid.dp());
  if (grid.cp() > 1)
    text += ", cp " + std::to_string(grid.cp());
  if (grid.pp() > 1)
    text += ", pp " + std::to_string(grid.pp());
  if (grid.ep() > 1)
    text += ", ep " + std::to_string(grid.ep());
  return text;
}

/// Whether the plan's ranks are the job's: -1 to run on this rank, else the exit code
/// (after `-n N` started N ranks through mpirun, or naming the mismatch).
int checkRanks(const mt::LoadedPlan &plan, const CommandLine &line, bool underMpi, int argc,
               char **argv) {
  const mt::plan::Grid &grid = *plan.plan().grid();
  const int planRanks = gridShape(grid).ranks();
  if (line.ranks > 0 && !underMpi) {
    if (line.ranks != planRanks) {
      std::fprintf(stderr, "mtrun: %s is compiled for %d rank(s) (%s), not %d\n",
                   line.planPath.c_str(), planRanks, gridText(grid).c_str(), line.ranks);
      return 1;
    }
    if (line.ranks > 1)
      return launchRanks(line.ranks, argc, argv);
  }
  if (worldSize() != planRanks) {
    std::fprintf(stderr, "mtrun: %s is compiled for %d rank(s) (%s), but %d are running%s\n",
                 line.planPath.c_str(), planRanks, gridText(grid).c_str(), worldSize(),
                 underMpi ? "" : " (start it with -n, or under mpirun)");
    return 1;
  }
  return -1;
}

/// This rank's backend (CUDA on GPU local-rank mod GPUs) and communicator (MPI, with
/// NCCL for CUDA, under a launcher; local otherwise). A failure is printed; an NCCL
/// set-up that fails ends the job.
bool makeDevices(const std::string &backendName, const mt::plan::Grid &grid, bool underMpi,
                 double collectiveTimeout, std::unique_ptr<mt::Backend> &backend,
                 std::unique_ptr<mt::Comm> &comm) {
  if (backendName == "cuda") {
    const int devices = mt::cudaDevices();
    mt::Status s = devices > 0 ? mt::makeCudaBackend(localRank() % devices, backend)
                               : mt::Status::failure("--backend cuda: no GPU is visible");
    if (!s.ok()) {
      std::fprintf(stderr, "mtrun: %s\n", s.message().c_str());
      return false;
    }
  } else {
    backend = mt::makeCpuBackend();
  }
  if (!underMpi) {
    comm = mt::makeLocalComm();
    return true;
  }
  if (mt::Status s = mt::makeMpiComm(gridShape(grid), comm); !s.ok()) {
    if (!s.message().empty())
      std::fprintf(stderr, "mtrun: %s\n", s.message().c_str());
    return false;
  }
  if (backendName == "cuda") {
    // NCCL's set-up waits for every rank: watched as training is.
    comm->setWatchdog(collectiveTimeout);
    comm->setActivity("setting up NCCL");
    if (mt::Status s = mt::makeNcclComm(comm); !s.ok())
      mt::abortAll(s.message());
  }
  return true;
}

/// Trains on this rank, then checks the arena: the exit code. From here on a failing
/// rank takes the whole job down, naming itself, so no rank is left waiting in a
/// collective.
int trainHere(const mt::LoadedPlan &plan, mt::Backend &backend, mt::Comm &comm,
              mt::TrainerConfig config, bool underMpi, bool profiled) {
  auto fail = [&](const mt::Status &s) -> int {
    if (underMpi)
      mt::abortAll(s.message());
    std::fprintf(stderr, "mtrun: %s\n", s.message().c_str());
    return 1;
  };
  // The backend and the communicator report failures as a Status; what can still throw
  // is the host's own work (its allocations, a JSON dump), which ends the job the same
  // way.
  try {
    // The ranks on a host share its cores: each one's kernels use its share.
    std::string threads;
    if (std::string(backend.name()) == "cpu") {
      mt::CpuThreads chosen;
      if (mt::Status s = mt::useCpuThreads(comm, chosen); !s.ok())
        return fail(s);
      threads = ", " + chosen.summary();
    }
    std::unique_ptr<mt::Executor> executor;
    if (mt::Status s = mt::Executor::create(plan, backend, comm, {}, executor); !s.ok())
      return fail(s);
    if (mt::Status s = backend.finish(); !s.ok())
      return fail(s);
    config.startStages.push_back({"placing the plan in memory", std::chrono::steady_clock::now()});
    const bool leader = comm.position().worldRank() == 0;
    std::unique_ptr<mt::Profile> profile;
    if (profiled) {
      profile = std::make_unique<mt::Profile>(backend.stopwatch());
      executor->setProfile(profile.get());
    }
    const mt::plan::Grid &grid = *plan.plan().grid();
    if (leader)
      std::printf("mtrun: %s on %s x %d (%s), %lld steps of %lld x %lld tokens%s\n",
                  plan.plan().model()->c_str(), backend.name(), gridShape(grid).ranks(),
                  gridText(grid).c_str(), static_cast<long long>(config.steps),
                  static_cast<long long>(plan.plan().global_batch_size()),
                  static_cast<long long>(plan.plan().seq_length()), threads.c_str());
    if (mt::Status s = mt::train(*executor, config, stdout); !s.ok())
      return fail(s);
    uint64_t written = 0;
    if (mt::Status s = executor->arenaBytesWritten(mt::Executor::kSentinel, written); !s.ok())
      return fail(s);
    if (written > executor->plannedArenaBytes())
      return fail(mt::Status::failure("an instruction wrote past the end of the arena"));
    if (leader)
      std::printf("arena: %llu bytes written, %llu planned\n",
                  static_cast<unsigned long long>(written),
                  static_cast<unsigned long long>(executor->plannedArenaBytes()));
  } catch (const std::bad_alloc &) {
    return fail(mt::Status::failure("out of host memory"));
  } catch (const std::exception &e) {
    return fail(mt::Status::failure(e.what()));
  }
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  const auto launched = std::chrono::steady_clock::now();
  CommandLine line;
  if (int code = parseCommandLine(argc, argv, line); code >= 0)
    return code;
  mt::TrainerConfig config;
  config.launched = launched;
  if (std::string error; !trainerConfig(line, config, error))
    return usageError(error);
  auto chosen = line.flags.find("backend");
  const std::string backendName = chosen != line.flags.end() ? chosen->second
                                  : mt::cudaDevices() > 0    ? "cuda"
                                                             : "cpu";
  if (backendName != "cpu" && backendName != "cuda")
    return usageError("--backend must be cpu or cuda, got '" + backendName + "'");

  mt::LoadedPlan plan;
  if (mt::Status s = mt::LoadedPlan::read(line.planPath, plan); !s.ok()) {
    std::fprintf(stderr, "mtrun: %s\n", s.message().c_str());
    return 1;
  }
  // Megatron's sample-based run: as many whole global batches as the samples hold.
  if (const int64_t samples = config.optimizer.trainSamples; samples > 0) {
    config.steps = samples / plan.plan().global_batch_size();
    if (config.steps == 0)
      return usageError(mt::cat("--train-samples ", samples, " is less than one global batch (",
                                plan.plan().global_batch_size(), " samples)"));
  }
  config.startStages.push_back({"reading the plan", std::chrono::steady_clock::now()});
  // One rank needs no communicator, even under a launcher (srun -n 1 on a node without
  // MPI); several load the MPI plugin.
  const bool underMpi = mt::launchedByMpi() && worldSize() > 1;
  if (int code = checkRanks(plan, line, underMpi, argc, argv); code >= 0)
    return code;
  std::unique_ptr<mt::Backend> backend;
  std::unique_ptr<mt::Comm> comm;
  if (!makeDevices(backendName, *plan.plan().grid(), underMpi, config.collectiveTimeout,
                   backend, comm))
    return 1;
  config.startStages.push_back({"starting the device", std::chrono::steady_clock::now()});
  return trainHere(plan, *backend, *comm, std::move(config), underMpi,
                   line.flags.count("profile") > 0);
}
