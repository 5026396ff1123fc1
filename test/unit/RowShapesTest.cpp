// The CUDA backend's row and column kernels' shapes, checked on the host: a norm
// gradient's blocks take every row exactly once, within kColumnBlocks blocks of 8 warps,
// their shared memory and partial sums as sized; the column sums' chunks cover every row.
#include "backends/cuda/RowShapes.h"

#include <gtest/gtest.h>

#include <vector>

namespace mt {
namespace {

TEST(RowShapes, ANormGradientsBlocksTakeEveryRowOnce) {
  int planned = 0;
  for (int64_t h : {128, 256, 768, 1024, 1536, 2048, 2560, 4096, 5120, 6144, 8192, 200, 12288})
    for (int64_t rows :
         {1, 2, 5, 6, 7, 8, 9, 63, 264, 265, 1202, 2112, 2113, 5002, 8192, 16384, 100003})
      for (int K : {1, 2}) {
        SCOPED_TRACE(testing::Message() << "h " << h << ", rows " << rows << ", K " << K);
        RowTeam held;
        const int quads = rowQuads(h, held);
        ColumnPlan plan;
        ASSERT_EQ(columnPlan(K, rows, h, plan), quads > 0);
        if (quads == 0)
          continue;
        ++planned;
        EXPECT_EQ(plan.quads, quads);
        EXPECT_EQ(plan.team.warps * plan.team.teams, 8) << "blocks of 8 warps";
        EXPECT_EQ(int64_t{128} * plan.quads * plan.team.warps, h);
        EXPECT_LE(plan.blocks, kColumnBlocks);
        EXPECT_EQ(plan.blockRows % plan.team.teams, 0);
        EXPECT_EQ(plan.slices, sizeof(float) * K * h * plan.team.teams);
        EXPECT_LE(plan.slices, size_t{64} << 10);
        EXPECT_GE(blockPartialsBytes(K, plan, h), sizeof(float) * plan.blocks * K * h);
        EXPECT_GE(normGradColumnBytes(K, rows, h),
                  blockPartialsBytes(K, plan, h) + columnSumScratchBytes(K, plan.blocks, h));
        // Every (block, team, step) names a row once; the rows past the last are
        // skipped, and each team's come in rising order.
        std::vector<int> seen(static_cast<size_t>(rows), 0);
        for (int64_t block = 0; block < plan.blocks; ++block) {
          bool any = false;
          for (int team = 0; team < plan.team.teams; ++team) {
            int64_t previous = -1;
            for (int step = 0; step < plan.blockRows / plan.team.teams; ++step) {
              const int64_t r = columnPlanRow(plan.blockRows, plan.team.teams, block, team, step);
              ASSERT_GT(r, previous);
              previous = r;
              ASSERT_GE(r, block * plan.blockRows);
              ASSERT_LT(r, (block + 1) * plan.blockRows);
              if (r < rows) {
                ++seen[static_cast<size_t>(r)];
                any = true;
              }
            }
          }
          EXPECT_TRUE(any) << "block " << block << " has no row";
        }
        for (int64_t r = 0; r < rows; ++r)
          ASSERT_EQ(seen[static_cast<size_t>(r)], 1) << "row " << r;
      }
  EXPECT_EQ(planned, 11 * 17 * 2) << "h 200 and 12,288 are no team's";
}

TEST(RowShapes, TheColumnSumsChunksCoverEveryRow) {
  for (int64_t rows : {0, 1, 255, 256, 257, 1202, 262144, 262145, 1 << 20}) {
    SCOPED_TRACE(rows);
    const int64_t per = columnSumChunkRows(rows), chunks = columnSumChunks(rows);
    EXPECT_GE(per, 256);
    EXPECT_LE(chunks, 1024);
    EXPECT_GE(chunks * per, rows);
    EXPECT_LT((chunks - 1) * per, std::max<int64_t>(rows, 1));
    EXPECT_EQ(columnSumScratchBytes(2, rows, 768), sizeof(float) * chunks * 2 * 768);
  }
}

} // namespace
} // namespace mt
