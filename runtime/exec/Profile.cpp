#include "exec/Profile.h"

#include <algorithm>
#include <map>

namespace mt {

double Profile::Entry::median() const {
  if (runs.empty())
    return 0;
  std::vector<double> sorted = runs;
  std::sort(sorted.begin(), sorted.end());
  const size_t n = sorted.size();
  return n % 2 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
}

void Profile::Entry::add(double seconds) {
  if (runs.size() < kWindow)
    runs.push_back(seconds);
  else
    runs[static_cast<size_t>(count) % kWindow] = seconds;
  ++count;
}

Status Profile::record(const std::vector<Entry *> &entries) {
  MT_TRY(stopwatch_->laps(laps_));
  if (laps_.size() != entries.size())
    return Status::failure(cat("profile: ", laps_.size(), " laps timed for ", entries.size(),
                               " entries"));
  for (size_t i = 0; i < entries.size(); ++i)
    entries[i]->add(laps_[i]);
  return Status::success();
}

Profile::Entry *Profile::find(uint32_t program, uint32_t index) const {
  return program < byInstruction_.size() && index < byInstruction_[program].size()
             ? byInstruction_[program][index]
             : nullptr;
}

Profile::Entry &Profile::instruction(uint32_t program, uint32_t index, const std::string &what,
                                     const std::string &where, const std::string &shape) {
  if (byInstruction_.size() <= program)
    byInstruction_.resize(program + 1);
  std::vector<Entry *> &row = byInstruction_[program];
  if (row.size() <= index)
    row.resize(index + 1, nullptr);
  if (!row[index]) {
    entries_.push_back(std::make_unique<Entry>(Entry{what, where, shape, 0, 0, {}}));
    row[index] = entries_.back().get();
  }
  return *row[index];
}

Profile::Entry &Profile::part(const std::string &name) {
  for (const std::unique_ptr<Entry> &e : entries_)
    if (e->where.empty() && e->what == name)
      return *e;
  entries_.push_back(std::make_unique<Entry>(Entry{name, "", "", 0, 0, {}}));
  return *entries_.back();
}

void Profile::print(std::FILE *out, int64_t steps, size_t slowest) const {
  if (steps <= 0)
    return;
  const double perStep = 1.0 / static_cast<double>(steps);
  struct Row {
    double runs = 0, seconds = 0, flops = 0;
  };
  // FLOP/s where the FLOPs are known, else blank: in TFLOP/s, or in GFLOP/s where no
  // instruction reaches one TFLOP/s (a CPU).
  double fastest = 0;
  for (const std::unique_ptr<Entry> &e : entries_)
    if (e->flops > 0 && e->median() > 0)
      fastest = std::max(fastest, e->flops / e->median());
  const double unit = fastest >= 1e12 ? 1e12 : 1e9;
  const char *unitName = unit == 1e12 ? "TFLOP/s" : "GFLOP/s";
  auto rate = [&](double flops, double seconds) {
    char text[16] = "";
    if (flops > 0 && seconds > 0)
      std::snprintf(text, sizeof text, "%.1f", flops / seconds / unit);
    return std::string(text);
  };
  std::map<std::string, Row> byWhat;
  std::vector<std::pair<double, const Entry *>> each;
  double total = 0, runs = 0;
  for (const std::unique_ptr<Entry> &e : entries_) {
    const double n = static_cast<double>(e->count) * perStep;
    const double seconds = e->median() * n;
    Row &row = byWhat[e->what];
    row.runs += n;
    row.seconds += seconds;
    row.flops += e->flops * n;
    total += seconds;
    runs += n;
    if (!e->where.empty())
      each.emplace_back(seconds, e.get());
  }
  std::vector<std::pair<std::string, Row>> rows(byWhat.begin(), byWhat.end());
  std::stable_sort(rows.begin(), rows.end(), [](const auto &a, const auto &b) {
    return a.second.seconds > b.second.seconds;
  });
  std::fprintf(out,
               "profile: device time per step over %lld steps (each instruction's median "
               "run x its runs per step)\n",
               static_cast<long long>(steps));
  std::fprintf(out, "  %-24s %10s %11s %7s %9s\n", "opcode or part", "runs/step", "ms/step",
               "share", unitName);
  auto share = [&](double seconds) { return total > 0 ? 100 * seconds / total : 0.0; };
  for (const auto &[what, row] : rows)
    std::fprintf(out, "  %-24s %10.0f %11.3f %6.1f%% %9s\n", what.c_str(), row.runs,
                 row.seconds * 1e3, share(row.seconds), rate(row.flops, row.seconds).c_str());
  std::fprintf(out, "  %-24s %10.0f %11.3f %6.1f%%\n", "total", runs, total * 1e3, 100.0);
  std::stable_sort(each.begin(), each.end(),
                   [](const auto &a, const auto &b) { return a.first > b.first; });
  if (each.size() > slowest)
    each.resize(slowest);
  if (each.empty())
    return;
  std::fprintf(out, "  slowest instructions:\n  %-24s %-28s %-24s %10s %11s %9s\n", "instruction",
               "opcode", "output", "ms/run", "ms/step", unitName);
  for (const auto &[seconds, e] : each)
    std::fprintf(out, "  %-24s %-28s %-24s %10.4f %11.3f %9s\n", e->where.c_str(),
                 e->what.c_str(), e->shape.c_str(), e->median() * 1e3, seconds * 1e3,
                 rate(e->flops, e->median()).c_str());
}

} // namespace mt
