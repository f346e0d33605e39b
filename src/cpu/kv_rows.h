#pragma once
// The CPU engine's KV cache: per layer, K and V rows of one prefix or one slot's suffix, laid out
// in tiles for the attention's blocked products (src/cpu/engine_attention.cpp).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "bestofn/engine/engine.h"
#include "bestofn/model/quantize.h"
#include "bestofn/util/error.h"
#include "bestofn/util/numeric.h"
#include "cpu/prefix_attention.h"

namespace bestofn::cpu {

// K or V of one layer, len rows of kv_dim values, in F32, BF16 or FP8 (EngineOptions::Kv: E4M3
// codes with one scale per row and KV head, quantize_fp8_rows over the row's heads; read as
// fp8_e4m3_to_float(code) * scale). Both are kept in tiles of cpu::kKeyTile positions (zeros past
// the last row). A K tile is (kv_dim, kKeyTile) element-major: one head's slice of it is then the
// transposed block that the score products read (cpu::prefix_scores), contiguous. A V tile is
// (head, position, head_dim): one head's rows of a tile are contiguous, so a head's values stream
// in order. Appending scatters a row into its tile once; nothing is transposed per query.
class KvRows {
 public:
  using Kv = EngineOptions::Kv;
  static constexpr std::size_t kTile = cpu::kKeyTile;
  KvRows(Kv kind, std::size_t width, std::size_t head_dim, bool keys)
      : kind_(kind), keys_(keys), width_(width), hd_(head_dim), heads_(width / head_dim) {}
  void append(const float* row) {
    const std::size_t j = len_++;
    if (j % kTile == 0) grow(width_ * kTile, heads_ * kTile);
    // Head by head: element i of head h at at(j, h * hd) + i * step (at()'s layouts, without a
    // division per element).
    const std::size_t step = keys_ ? kTile : 1;
    auto scatter = [&](auto* dst, auto value) {
      for (std::size_t h = 0; h < heads_; ++h) {
        auto* d = dst + at(j, h * hd_);
        const std::size_t e0 = h * hd_;
        for (std::size_t i = 0; i < hd_; ++i) d[i * step] = value(e0 + i);
      }
    };
    switch (kind_) {
      case Kv::BF16:
        scatter(h_.data(), [&](std::size_t e) { return bf16_from_float(row[e]); });
        break;
      case Kv::FP8: {
        thread_local std::vector<std::uint8_t> codes;
        codes.resize(width_);
        quantize_fp8_rows(row, heads_, hd_, codes.data(), s_.data() + j * heads_);
        scatter(c_.data(), [&](std::size_t e) { return codes[e]; });
        break;
      }
      default:
        scatter(f_.data(), [&](std::size_t e) { return row[e]; });
    }
  }
  // One head's slice of row j (off = head * head_dim, n = head_dim), as floats (V only).
  void read(std::size_t j, std::size_t off, std::size_t n, float* out) const {
    const std::size_t base = at(j, off);
    if (j % kTile == 0 && j + kTile < len_) prefetch(base + width_ * kTile, hd_ * kTile);  // the head's next tile
    widen_row(j, off, base, n, out);
  }
  // One head's slice (off = head * head_dim, n = head_dim) of V rows j0 .. j0 + kTile - 1 as
  // floats, row p at out + p * stride, zeros from n to stride and past the last row (V only;
  // j0 % kTile == 0): cpu::ValueTileReader.
  void read_value_tile(std::size_t j0, std::size_t off, std::size_t n, std::size_t stride, float* out) const {
    const std::size_t base = at(j0, off);  // the head's kTile rows of n, contiguous
    if (j0 + kTile < len_) prefetch(base + width_ * kTile, n * kTile);  // tiles are read in order: the next one now
    for (std::size_t p = 0; p < kTile; ++p) {
      float* o = out + p * stride;
      widen_row(j0 + p, off, base + p * n, n, o);  // past the last row: zero codes and scales
      std::fill(o + n, o + stride, 0.0f);
    }
  }
  // Elements [off, off + n) (one head's slice) of the rows j0 .. j0 + kTile - 1, transposed, as
  // floats: out[i * kTile + p] = row (j0 + p)[off + i], zero past the last row (K only;
  // j0 % kTile == 0).
  void read_tile(std::size_t j0, std::size_t off, std::size_t n, float* out) const {
    const std::size_t base = at(j0, off);
    if (j0 + kTile < len_) prefetch(base + width_ * kTile, n * kTile);  // tiles are read in order: the next one now
    switch (kind_) {
      case Kv::BF16:
        for (std::size_t i = 0; i < n * kTile; ++i) out[i] = bf16_to_float(h_[base + i]);
        break;
      case Kv::FP8: {
        float scale[kTile];  // zero past the last row, as the codes are
        for (std::size_t p = 0; p < kTile; ++p) scale[p] = s_[(j0 + p) * heads_ + off / hd_];
        for (std::size_t i = 0; i < n; ++i)
          for (std::size_t p = 0; p < kTile; ++p) out[i * kTile + p] = fp8_e4m3_to_float_finite(c_[base + i * kTile + p]) * scale[p];
        break;
      }
      default:
        std::memcpy(out, f_.data() + base, n * kTile * sizeof(float));
    }
  }
  std::size_t rows() const { return len_; }
  // Drops rows n .. rows() - 1 (n <= rows()): their tiles' entries become zeros again, as append
  // and the tile readers expect past the last row, and tiles wholly past n are freed.
  void truncate(std::size_t n) {
    if (n > len_) throw Error("KvRows::truncate: " + std::to_string(n) + " rows asked of " + std::to_string(len_));
    const std::size_t tiles = (n + kTile - 1) / kTile, kept = std::min(len_, tiles * kTile);
    for (std::size_t j = n; j < kept; ++j)
      for (std::size_t e = 0; e < width_; ++e) {
        const std::size_t i = at(j, e);
        switch (kind_) {
          case Kv::BF16: h_[i] = 0; break;
          case Kv::FP8: c_[i] = 0; break;
          default: f_[i] = 0.0f;
        }
      }
    if (kind_ == Kv::FP8) {
      std::fill(s_.begin() + static_cast<std::ptrdiff_t>(n * heads_), s_.begin() + static_cast<std::ptrdiff_t>(kept * heads_), 0.0f);
      s_.resize(tiles * kTile * heads_);
    }
    h_.resize(kind_ == Kv::BF16 ? tiles * kTile * width_ : 0);
    c_.resize(kind_ == Kv::FP8 ? tiles * kTile * width_ : 0);
    f_.resize(kind_ == Kv::F32 ? tiles * kTile * width_ : 0);
    len_ = n;
  }
  // A BF16 cache read in place (cpu::prefix_scores_bf16 / prefix_values_bf16): one head's slice
  // (off = head * head_dim) of the first tile, tiles tile_stride() elements apart; nullptr for
  // other kinds and an empty cache.
  const std::uint16_t* bf16_head(std::size_t off) const { return kind_ == Kv::BF16 && len_ > 0 ? h_.data() + at(0, off) : nullptr; }
  std::size_t tile_stride() const { return width_ * kTile; }

 private:
  // Elements [base, base + n) of V row j (the head of element off) as floats.
  void widen_row(std::size_t j, std::size_t off, std::size_t base, std::size_t n, float* out) const {
    switch (kind_) {
      case Kv::BF16:
        for (std::size_t i = 0; i < n; ++i) out[i] = bf16_to_float(h_[base + i]);
        break;
      case Kv::FP8: {
        const float scale = s_[j * heads_ + off / hd_];
        for (std::size_t i = 0; i < n; ++i) out[i] = fp8_e4m3_to_float_finite(c_[base + i]) * scale;
        break;
      }
      default:
        std::memcpy(out, f_.data() + base, n * sizeof(float));
    }
  }
  // Where element e of row j is.
  std::size_t at(std::size_t j, std::size_t e) const {
    const std::size_t tile = j / kTile * width_ * kTile, lane = j % kTile;
    return keys_ ? tile + e * kTile + lane : tile + e / hd_ * hd_ * kTile + lane * hd_ + e % hd_;
  }
  // Asks for the cache lines of elements [e, e + n).
  void prefetch(std::size_t e, std::size_t n) const {
    const std::size_t bytes = kind_ == Kv::BF16 ? 2 : kind_ == Kv::FP8 ? 1 : 4;
    const char* p = kind_ == Kv::BF16   ? reinterpret_cast<const char*>(h_.data())
                    : kind_ == Kv::FP8 ? reinterpret_cast<const char*>(c_.data())
                                       : reinterpret_cast<const char*>(f_.data());
    for (std::size_t b = e * bytes; b < (e + n) * bytes; b += 64) __builtin_prefetch(p + b);
  }
  // Room for `values` more elements (zeros) and, for FP8, `scales` more scales.
  void grow(std::size_t values, std::size_t scales) {
    switch (kind_) {
      case Kv::BF16: h_.resize(h_.size() + values); break;
      case Kv::FP8: c_.resize(c_.size() + values), s_.resize(s_.size() + scales); break;
      default: f_.resize(f_.size() + values);
    }
  }
  Kv kind_;
  bool keys_;  // K's tiles (else V's)
  std::size_t width_, hd_, heads_, len_ = 0;
  std::vector<float> f_;
  std::vector<std::uint16_t> h_;
  std::vector<std::uint8_t> c_;
  std::vector<float> s_;  // FP8: (rows, heads), grown a whole tile at a time (zeros past len_)
};

struct Cache {  // per layer K and V
  std::vector<KvRows> k, v;
  Cache(int layers, EngineOptions::Kv kind, std::size_t width, std::size_t head_dim) {
    for (int l = 0; l < layers; ++l) k.emplace_back(kind, width, head_dim, true), v.emplace_back(kind, width, head_dim, false);
  }
};

}  // namespace bestofn::cpu
