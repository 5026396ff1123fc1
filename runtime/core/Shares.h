// How a flat store of parameters is cut into equal shares, one per rank that shares it
// (the distributed optimizer's): whole shares, and at least one element each. mtrun's
// flat layout (exec/Executor.cpp: flatLayout) and mtc's account of what a rank holds
// (compiler/Accounting.cpp) both round with it.
#ifndef MT_RUNTIME_CORE_SHARES_H
#define MT_RUNTIME_CORE_SHARES_H

#include <algorithm>
#include <cstdint>

namespace mt {

/// `n` elements rounded up to whole shares of `parts`, at least one element a share.
inline int64_t paddedToShares(int64_t n, int64_t parts) {
  return std::max<int64_t>(parts, (n + parts - 1) / parts * parts);
}

} // namespace mt

#endif // MT_RUNTIME_CORE_SHARES_H
