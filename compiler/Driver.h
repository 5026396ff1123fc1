// What mtc's commands share between argv and the compiler: a command line's flags read
// into a layout, a precision and a system; a model file loaded with its diagnostics; and
// a step compiled to its plan. tools/mtc parses argv and calls these; Report.h prints
// what they produce. A misuse of the flags returns 2 (mtc then prints its usage), any
// other failure 1, each said on stderr first (MLIR's diagnostics point into the model).
#ifndef MT_COMPILER_DRIVER_H
#define MT_COMPILER_DRIVER_H

#include "compiler/Estimate.h"
#include "compiler/PlanEmitter.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OwningOpRef.h"
#include "mlir/Support/LLVM.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/SourceMgr.h"

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace mlir {
class SourceMgrDiagnosticHandler;
}

namespace mtc {

/// One command line: its command, its model file, and its flags, `--name value` (or
/// `--name=value`) and switches, under mtc's names.
struct Flags {
  std::string command, model;
  llvm::StringMap<std::string> values;
  llvm::StringMap<bool> switches;
};

/// Says "mtc: `message`" on stderr; returns 2, a misuse of the flags.
int usageError(const std::string &message);

/// A positive integer flag, `fallback` when absent; false (said on stderr) otherwise.
bool positiveFlag(const Flags &flags, llvm::StringRef name, int64_t fallback, int64_t &out);
/// --attention-dropout and --hidden-dropout (a rate in [0, 1) each) and
/// --moe-expert-capacity-factor (>= 0), or, absent, the model's own (negative); false
/// (said on stderr) otherwise.
bool modelFlags(const Flags &flags, CompileOptions &options);
/// The fusions the --no-*-fusion switches leave on.
Fusions fusionsOf(const Flags &flags);
/// --precision, --bf16 or --fp16: the name (fp32 by default) and the element type; 0 or
/// an exit code.
int readPrecision(const Flags &flags, std::string &precision, std::string &elementType);
/// The layout flags compile and estimate share, up to what needs the model. With
/// `--gpus N` (estimate), dp defaults to N / (tp x pp). 0, or an exit code.
int readLayout(const Flags &flags, StepLayout &layout, std::string &precision);
/// What of the layout needs the model: virtual stages given as layers per chunk, and
/// the schedule, with the most micro-batches each stage holds in flight (`inFlight`, per
/// stage in chunks). 0, or an exit code.
int finishLayout(const Flags &flags, const std::optional<DecoderShape> &decoder,
                 StepLayout &layout, std::vector<int64_t> &inFlight);
/// The system `--system` names (with --gpus given), read; 0, or an exit code.
int readSystem(const Flags &flags, SystemSpec &system);

/// A parsed model and the source manager its diagnostics point into: errors print as
/// file:line:col for as long as it lives.
struct ModelFile {
  ModelFile();
  ~ModelFile();
  std::shared_ptr<llvm::SourceMgr> sources;
  std::unique_ptr<mlir::SourceMgrDiagnosticHandler> diagnostics;
  mlir::OwningOpRef<mlir::ModuleOp> module;
};
/// Parses the model at `path`; false (said on stderr) where it cannot.
bool loadModel(mlir::MLIRContext &context, const std::string &path, ModelFile &model);
/// The model's name: its mt.model attribute, else its file's stem.
std::string modelName(mlir::ModuleOp module, const std::string &path);
/// The sequence length of a lowered step: its programs' token arguments are [b, s], each
/// context-parallel rank's share s/cp under context parallelism.
int64_t loweredSeqLength(mlir::ModuleOp module);

/// A training step compiled for one rank: the plan's bytes, its header and account, and
/// what the report says of the model.
struct CompiledStep {
  std::vector<uint8_t> plan;
  PlanHeader header;
  StepAccount account;
  std::optional<DecoderShape> decoder;   // as given, before lowering
  std::optional<int64_t> layerBytes;     // kept for backward by layer 0
};
/// Prepares `module` (model file `path`), finishes `layout` from the flags, lowers,
/// accounts and emits the plan. 0, or an exit code.
int compileStep(const Flags &flags, mlir::ModuleOp module, const std::string &path,
                StepLayout &layout, CompiledStep &out);

} // namespace mtc

#endif
