// What mtc's commands print: the compiled step's account, an estimate, tune's ranking and
// a pipeline schedule, as text (and the estimates as JSON), from what Driver.h produced.
#ifndef MT_COMPILER_REPORT_H
#define MT_COMPILER_REPORT_H

#include "compiler/Driver.h"
#include "compiler/Tune.h"
#include "plan/Schedule.h"

#include <string>

namespace mtc {

/// `mtc compile`'s report: the plan written to `output` in `seconds`, its layout, batch,
/// parameters, FLOPs per step and bytes per rank.
void printCompile(const CompiledStep &step, const StepLayout &layout,
                  const std::string &precision, const std::string &output, double seconds);
/// `mtc estimate`'s report of `e` (as JSON with `json`); with `trainTokens`, the days and
/// GPU-hours to train on them.
void printEstimate(const StepEstimate &e, const SystemSpec &system, const StepLayout &layout,
                   const std::string &model, const std::string &precision, int64_t seqLength,
                   double trainTokens, bool json, bool explain = false);
/// `mtc tune`'s ranking: the `top` fastest layouts that fit, and why the rest were
/// rejected (as JSON with `json`). 1 when none fits (said on stderr), else 0.
int printTune(const TuneResult &result, const TuneRequest &request, const SystemSpec &system,
              const std::string &model, const std::string &precision, int64_t seqLength,
              double seconds, int64_t top, bool json);
/// `mtc schedule`'s report: each stage's order, what each holds in flight, the bubble.
void printSchedule(const ::mt::PipelineSchedule &schedule, const ::mt::ScheduleCheck &check,
                   const std::string &name, int64_t stages, int64_t chunks,
                   int64_t microBatches);

} // namespace mtc

#endif
