#pragma once
// --paged-kv: the suffix KV cache in blocks of kBlockTokens positions, one K pool and one V pool
// per layer, handed out by a KvBlockPool (src/cuda/plan.h: free list and admission budgets). A
// slot's suffix row j lives at pool row blocks[j / kBlockTokens] * kBlockTokens + j % kBlockTokens,
// the same row in every layer.
#include <cstdint>
#include <span>
#include <vector>

#include "cuda/device_buffer.h"
#include "cuda/plan.h"

namespace bestofn::cuda {

struct PagedSlot {
  std::vector<int> blocks;  // the block table
  int budget_left = 0;      // blocks promised at admission and not yet taken
};

class PagedKv {
 public:
  static constexpr int kBlockTokens = 16;
  // blocks 0: half the device memory free now. row_bytes: one cache row of one layer (K or V).
  PagedKv(int n_layers, std::size_t row_bytes, int blocks);

  // Admission: promises blocks for max_tokens positions when the free blocks cover them on top of
  // every earlier promise not yet taken.
  bool admit(PagedSlot& s, int max_tokens);
  void release(PagedSlot& s);
  // A block for every slot whose next row (at lens[i]) starts a block, or an error with nothing
  // taken when the pool cannot give them outside the promises; then the slots' block tables,
  // flat, and each one's start in them.
  void take(std::span<PagedSlot* const> slots, std::span<const int> lens, std::vector<int>& tables, std::vector<int>& starts);
  std::size_t row(const PagedSlot& s, int j) const {
    return static_cast<std::size_t>(s.blocks[static_cast<std::size_t>(j / kBlockTokens)]) * kBlockTokens +
           static_cast<std::size_t>(j % kBlockTokens);
  }
  std::uint16_t* k(int layer) const { return k_[static_cast<std::size_t>(layer)].get<std::uint16_t>(); }
  std::uint16_t* v(int layer) const { return v_[static_cast<std::size_t>(layer)].get<std::uint16_t>(); }

 private:
  KvBlockPool pool_;
  std::vector<DeviceBuffer> k_, v_;
};

}  // namespace bestofn::cuda
