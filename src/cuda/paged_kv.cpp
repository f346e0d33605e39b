#include "cuda/paged_kv.h"

#include <algorithm>
#include <string>

#include "bestofn/util/error.h"
#include "cuda/cuda_check.h"

namespace bestofn::cuda {
namespace {

// Half the device memory free now, in blocks of per_block bytes (leaves room for the prefixes,
// activations and workspaces).
int blocks_for_memory(int blocks, std::size_t per_block) {
  if (blocks > 0) return blocks;
  std::size_t free_b = 0, total_b = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  blocks = static_cast<int>(std::min<std::size_t>(free_b / 2 / per_block, std::size_t{1} << 30));
  if (blocks < 1) throw Error("paged KV: no device memory left for one KV block (" + std::to_string(per_block) + " bytes)");
  return blocks;
}

}  // namespace

PagedKv::PagedKv(int n_layers, std::size_t row_bytes, int blocks, bool scratch_block)
    : pool_(blocks_for_memory(blocks, 2 * row_bytes * kBlockTokens * static_cast<std::size_t>(n_layers)), kBlockTokens) {
  const std::size_t pool_blocks = static_cast<std::size_t>(pool_.blocks()) + (scratch_block ? 1 : 0);
  pool_bytes_ = pool_blocks * kBlockTokens * row_bytes;
  buf_.resize(2 * static_cast<std::size_t>(n_layers) * pool_bytes_);
  if (scratch_block) scratch_ = pool_.blocks();  // past the pool's own blocks: never handed out
}

bool PagedKv::admit(PagedSlot& s, int max_tokens) {
  const int budget = pool_.blocks_for(std::max(max_tokens, 0));
  if (!pool_.admit(budget)) return false;
  s.budget = s.budget_left = budget;
  return true;
}

void PagedKv::release(PagedSlot& s) {
  pool_.retire(s.budget_left);
  for (int b : s.blocks) pool_.give(b);
  s.blocks.clear(), s.budget = s.budget_left = 0;
}

}  // namespace bestofn::cuda
