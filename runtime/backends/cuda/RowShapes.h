// The launch shapes of the CUDA backend's row and column kernels, and the scratch they
// take, decided on the host by the shape alone (so that every run sums in the same order):
// the column sums' chunks of rows (ColumnSums.cuh); the teams of warps that hold a norm's
// rows in registers, and the blocks of a norm's gradient that begin its weight
// gradients' column sums (Norms.cuh). Host code (and the arithmetic the kernels share):
// tested without a GPU.
#ifndef MT_RUNTIME_BACKENDS_CUDA_ROWSHAPES_H
#define MT_RUNTIME_BACKENDS_CUDA_ROWSHAPES_H

#include "core/SharedMath.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace mt {

/// Rows per chunk of the column sums' first pass: at least 256, and at most 1024 chunks.
inline int64_t columnSumChunkRows(int64_t rows) {
  return std::max<int64_t>(256, (rows + 1023) / 1024);
}
inline int64_t columnSumChunks(int64_t rows) {
  const int64_t per = columnSumChunkRows(rows);
  return std::max<int64_t>(1, (rows + per - 1) / per);
}
/// The f32 scratch the partial sums of K sums over `cols` columns take.
inline size_t columnSumScratchBytes(int K, int64_t rows, int64_t cols) {
  return sizeof(float) * static_cast<size_t>(columnSumChunks(rows) * K * cols);
}

/// A team of `warps` warps holds a row of h = 128·Q·warps elements in registers, each
/// thread Q quads of it (Norms.cuh); a block holds `teams` of them.
struct RowTeam {
  int warps = 1;
  int teams = 4; // 4 one-warp teams, else 1 (8 warps' worth in a gradient's column sums)
  MT_HOST_DEVICE int threads() const { return 32 * warps; }
};

/// Q for rows of h elements, with `team` their team, or 0 where the block-per-row
/// kernels run.
inline int rowQuads(int64_t h, RowTeam &team) {
  // At most 8 warps, 256 threads: a team's registers (up to ~130 a thread) allow no more.
  for (int warps = 1; warps <= 8; warps *= 2)
    if (h % (128 * warps) == 0 && h / (128 * warps) <= 8) {
      team.warps = warps;
      team.teams = warps == 1 ? 4 : 1;
      return static_cast<int>(h / (128 * warps));
    }
  return 0;
}

/// A norm gradient's rows kernel begins its K column sums: a block of 8 warps (8 / W
/// teams) takes `blockRows` consecutive rows, its teams in turn; at most kColumnBlocks
/// blocks, two to each of Hopper's 132 multiprocessors (what a block's registers allow),
/// so their partial sums take at most 2 KB a column (GPT-2's 8,192 rows of 768: 256
/// blocks, 1.5 MB; GPT-3 1.3B's of 2,048: 4 MB).
constexpr int64_t kColumnBlocks = 264;

struct ColumnPlan {
  RowTeam team;
  int quads = 0;
  int64_t blocks = 0, blockRows = 0;
  size_t slices = 0; // a block's shared memory: 4 KB · K · quads, at most 64 KB
};
/// False where the rows kernel cannot (rows not held in registers, or none).
inline bool columnPlan(int K, int64_t rows, int64_t h, ColumnPlan &plan) {
  plan.quads = rows > 0 ? rowQuads(h, plan.team) : 0;
  if (plan.quads == 0)
    return false;
  const int teams = plan.team.teams = 8 / plan.team.warps;
  plan.slices = sizeof(float) * static_cast<size_t>(K * h * teams);
  const int64_t perBlock = (rows + kColumnBlocks - 1) / kColumnBlocks;
  plan.blockRows = (perBlock + teams - 1) / teams * teams;
  plan.blocks = (rows + plan.blockRows - 1) / plan.blockRows;
  return true;
}
/// The row team `team` of block `block` takes at its `step`-th turn (past the last row
/// where the block's rows run out).
MT_HOST_DEVICE inline int64_t columnPlanRow(int64_t blockRows, int teams, int64_t block, int team,
                                            int step) {
  return block * blockRows + team + static_cast<int64_t>(step) * teams;
}
inline size_t blockPartialsBytes(int K, const ColumnPlan &plan, int64_t h) {
  return (sizeof(float) * static_cast<size_t>(plan.blocks * K * h) + 255) / 256 * 256;
}

/// The f32 scratch a norm's gradient sums its K column terms in, after its rows'
/// statistics: the blocks' partials and their sums' where the rows kernel begins them,
/// else the column sums' own.
inline size_t normGradColumnBytes(int K, int64_t rows, int64_t h) {
  ColumnPlan plan;
  if (columnPlan(K, rows, h, plan))
    return blockPartialsBytes(K, plan, h) + columnSumScratchBytes(K, plan.blocks, h);
  return columnSumScratchBytes(K, rows, h);
}

} // namespace mt

#endif
