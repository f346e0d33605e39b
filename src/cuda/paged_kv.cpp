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
  if (blocks < 1) throw Error("--paged-kv: no device memory left for one KV block (" + std::to_string(per_block) + " bytes)");
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
  s.budget_left = budget;
  return true;
}

void PagedKv::release(PagedSlot& s) {
  pool_.retire(s.budget_left);
  for (int b : s.blocks) pool_.give(b);
  s.blocks.clear(), s.budget_left = 0;
}

void PagedKv::take(std::span<PagedSlot* const> slots, std::span<const int> lens) {
  auto needs = [&](std::size_t i) { return pool_.blocks_for(lens[i] + 1) > static_cast<int>(slots[i]->blocks.size()); };
  int outside = 0;  // blocks this step takes outside every promise
  for (std::size_t i = 0; i < slots.size(); ++i)
    if (needs(i) && slots[i]->budget_left == 0) ++outside;
  if (outside > pool_.free_blocks() - pool_.promised())
    throw Error("--paged-kv: out of KV blocks (" + std::to_string(pool_.free_blocks()) + " free, " + std::to_string(pool_.promised()) +
                " promised to admitted candidates, " + std::to_string(outside) + " needed); admit candidates with try_add_slot");
  for (std::size_t i = 0; i < slots.size(); ++i) {
    if (!needs(i)) continue;
    PagedSlot& s = *slots[i];
    const int b = pool_.take();
    if (b < 0) throw Error("--paged-kv: the block pool ran dry inside a promise (a bug)");
    pool_.taken(s.budget_left);
    s.budget_left = std::max(s.budget_left - 1, 0);
    s.blocks.push_back(b);
  }
}

}  // namespace bestofn::cuda
