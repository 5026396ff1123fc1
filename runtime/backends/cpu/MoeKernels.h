// Mixture of experts on the CPU (plan.fbs: MoeRouter to MoeCombineGrad, and MoeDrop), in
// f32 or f64: top-k routing with the load-balancing loss's gradient, the probs policy's
// drops, dispatch of each token's slots as rows sorted by expert, the experts' grouped
// GEMMs, and the gated combine. Every sum runs in a fixed order (a token's slots in slot
// order), so results never depend on threads.
#ifndef MT_RUNTIME_BACKENDS_CPU_MOEKERNELS_H
#define MT_RUNTIME_BACKENDS_CPU_MOEKERNELS_H

#include "backends/Backend.h"
#include "core/Status.h"

namespace mt::cpu {

/// Runs mixture-of-experts instruction `inst`, its float operands of type T (float or
/// double); a failure names what is wrong with its routing.
template <typename T>
Status runMoe(const plan::Instruction &inst, const TensorView *in, const TensorView *out,
              const StepContext &ctx);

} // namespace mt::cpu

#endif // MT_RUNTIME_BACKENDS_CPU_MOEKERNELS_H
