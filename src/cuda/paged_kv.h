#pragma once
// Paged KV: the suffix KV cache in blocks of kBlockTokens positions, one K pool and one V pool
// per layer, handed out by a KvBlockPool (src/cuda/plan.h: free list and admission budgets). A
// slot's suffix row j lives at pool row blocks[j / kBlockTokens] * kBlockTokens + j % kBlockTokens,
// the same row in every layer.
#include <cstdint>
#include <span>
#include <vector>

#include "cuda/device_buffer.h"
#include "cuda/plan.h"
#include "cuda/step_plan.h"

namespace bestofn::cuda {

class PagedKv {
 public:
  static constexpr int kBlockTokens = 16;
  // blocks 0: half the device memory free now. row_bytes: one cache row of one layer (K or V).
  // scratch_block: one more block, never admitted or taken, for padding rows to write into.
  PagedKv(int n_layers, std::size_t row_bytes, int blocks, bool scratch_block = false);

  // Admission: promises blocks for max_tokens positions when the free blocks cover them on top of
  // every earlier promise not yet taken.
  bool admit(PagedSlot& s, int max_tokens);
  void release(PagedSlot& s);
  // Blocks for every slot up to its row lens[i] (take_blocks: the next row, or a run's last), or an
  // error with nothing taken when the pool cannot give them outside the promises. The block tables
  // are the slots' own (PagedSlot::blocks); the step planner stages them.
  void take(std::span<PagedSlot* const> slots, std::span<const int> lens) { take_blocks(pool_, slots, lens); }
  // The blocks past the slot's first `rows` rows back into its promise (truncate_slot).
  void shrink(PagedSlot& s, int rows) { shrink_blocks(pool_, s, rows); }
  std::size_t row(const PagedSlot& s, int j) const {
    return static_cast<std::size_t>(s.blocks[static_cast<std::size_t>(j / kBlockTokens)]) * kBlockTokens +
           static_cast<std::size_t>(j % kBlockTokens);
  }
  // The pools, all layers in one allocation: layer l's K pool at k(0) + l x layer stride, its V
  // pool right after it (layout(): what a step's row descriptors carry; see KvPart for why one
  // allocation). Each pool holds blocks() x kBlockTokens rows (+ the scratch block).
  std::uint16_t* k(int layer) const { return at(2 * static_cast<std::size_t>(layer) * pool_bytes_); }
  std::uint16_t* v(int layer) const { return at((2 * static_cast<std::size_t>(layer) + 1) * pool_bytes_); }
  KvLayout layout() const {
    const auto base = reinterpret_cast<std::uintptr_t>(buf_.get());
    return {base, base + pool_bytes_, 2 * pool_bytes_};
  }
  int blocks() const { return pool_.blocks(); }
  int scratch_block() const { return scratch_; }  // -1 without one

 private:
  std::uint16_t* at(std::size_t byte) const { return reinterpret_cast<std::uint16_t*>(buf_.get<std::uint8_t>() + byte); }
  KvBlockPool pool_;
  std::size_t pool_bytes_ = 0;
  DeviceBuffer buf_;
  int scratch_ = -1;
};

}  // namespace bestofn::cuda
