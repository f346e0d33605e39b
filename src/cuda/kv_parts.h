#pragma once
// What the CUDA engine keeps of each sequence: a prompt's prefix and a candidate's slot, each a KV
// part on the device (a prefix's also in the forms its attention path reads: an F32 copy for
// prefix-GEMM attention, a page run for cascade attention).
#include <cstddef>
#include <cstdint>

#include "cuda/device_buffer.h"
#include "cuda/plan.h"
#include "cuda/step_plan.h"

namespace bestofn::cuda {

// K and V of one sequence part (a prefix, or a slot's suffix): cache rows in the engine's KvFormat
// (row_bytes each), every layer in one allocation: layer l's `capacity` K rows, then its V rows, so
// layer l sits at base + l x (2 capacity row_bytes) (layout(): what a step's row descriptor carries,
// and expand_step_pointers_cuda turns into the per-layer pointers on the device). One allocation
// rather than 2 x layers: a slot's part is one cudaMalloc (64 per slot before, at 32 layers) and
// its growth one 2-D copy, and nothing needs uploading when it moves; separate buffers would need
// a per-layer base table on the device, uploaded again on every growth.
struct KvPart {
  DeviceBuffer buf;
  std::size_t row_bytes = 0;
  int len = 0, capacity = 0;
  std::uint16_t* k(int l) const { return row_at(2 * static_cast<std::size_t>(l) * static_cast<std::size_t>(capacity)); }
  std::uint16_t* v(int l) const { return row_at((2 * static_cast<std::size_t>(l) + 1) * static_cast<std::size_t>(capacity)); }
  KvLayout layout() const {
    const auto base = reinterpret_cast<std::uintptr_t>(buf.get());
    const std::uint64_t half = static_cast<std::uint64_t>(capacity) * row_bytes;
    return {base, base + half, 2 * half};
  }

 private:
  std::uint16_t* row_at(std::size_t r) const { return reinterpret_cast<std::uint16_t*>(buf.get<std::uint8_t>() + r * row_bytes); }
};

// Prefix-GEMM attention: a prompt's K/V widened to F32 for the prefix GEMMs, every layer in one
// allocation (layer l's `capacity` K rows of kv_dim floats, then its V rows), taken at prefill from
// a pool that reserve() filled, as the KV parts are (no cudaMalloc inside a run).
struct F32KvPart {
  DeviceBuffer buf;
  std::size_t kv_dim = 0;
  int capacity = 0;
  float* k(int l) const { return buf.get<float>() + 2 * static_cast<std::size_t>(l) * rows(); }
  float* v(int l) const { return buf.get<float>() + (2 * static_cast<std::size_t>(l) + 1) * rows(); }

 private:
  std::size_t rows() const { return static_cast<std::size_t>(capacity) * kv_dim; }
};

struct Prefix {
  KvPart kv;
  int slots = 0;
  F32KvPart wide;         // Prefix-GEMM attention: the K/V widened to F32
  int cascade_page = -1;  // Cascade attention: the first page of its run in the page pool
};

struct Slot {
  int prefix = -1;
  KvPart kv;        // contiguous KV: the suffix rows; paged KV: kv.len only (the rows are in blocks)
  PagedSlot paged;  // Paged KV: the block table and the promise
};

}  // namespace bestofn::cuda
