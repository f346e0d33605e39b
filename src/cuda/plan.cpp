// Host-side planning for the CUDA engine (plain C++, in bestofn_core; see plan.h).
#include "cuda/plan.h"

#include <algorithm>
#include <string>

#include "bestofn/util/error.h"

namespace bestofn::cuda {

PrefixStateMap prefix_state_map(const std::vector<std::vector<int>>& group_rows, int T, int n_heads, int n_kv) {
  if (n_kv <= 0 || n_heads % n_kv != 0)
    throw Error("prefix_state_map", "n_heads " + std::to_string(n_heads) + " is not a multiple of n_kv " + std::to_string(n_kv));
  const int group = n_heads / n_kv;
  PrefixStateMap m;
  const auto Ts = static_cast<std::size_t>(T);
  m.map.assign(3 * Ts, -1);
  for (const auto& rows : group_rows) {
    const int R = static_cast<int>(rows.size()) * group;
    m.base.push_back(m.rows);
    m.R.push_back(R);
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const int t = rows[i];
      if (t < 0 || t >= T || m.map[static_cast<std::size_t>(t)] != -1)
        throw Error("prefix_state_map", "batch row " + std::to_string(t) + " is out of range or in two groups");
      m.map[static_cast<std::size_t>(t)] = m.rows;
      m.map[Ts + static_cast<std::size_t>(t)] = R;
      m.map[2 * Ts + static_cast<std::size_t>(t)] = static_cast<int>(i);
    }
    m.rows += n_kv * R;
  }
  for (std::size_t t = 0; t < Ts; ++t)
    if (m.map[t] == -1) throw Error("prefix_state_map", "batch row " + std::to_string(t) + " is in no group");
  return m;
}

PrefixGemms prefix_gemms(int L, int R, int n_kv, int hd) {
  const int kv_dim = n_kv * hd;
  PrefixGemms g;
  // S^T = K Q^T: A = K stored hd x L (column-major view of L rows, ld kv_dim), transposed.
  g.scores = {true, false, L, R, hd, kv_dim, hd, L, hd, static_cast<long long>(R) * hd, static_cast<long long>(R) * L, n_kv};
  // O^T = V^T P^T: A = V stored hd x L (ld kv_dim), B = P stored L x R (ld L).
  g.values = {false, false, hd, R, L, kv_dim, L, hd, hd, static_cast<long long>(R) * L, static_cast<long long>(R) * hd, n_kv};
  return g;
}

KvBlockPool::KvBlockPool(int blocks, int block_tokens) : block_tokens_(block_tokens) {
  if (blocks < 0 || block_tokens < 1)
    throw Error("KvBlockPool", "expected blocks >= 0 and block_tokens >= 1, got " + std::to_string(blocks) + ", " + std::to_string(block_tokens));
  used_.assign(static_cast<std::size_t>(blocks), false);
  for (int b = blocks - 1; b >= 0; --b) free_.push_back(b);  // block 0 is taken first
}

int KvBlockPool::take() {
  if (free_.empty()) return -1;
  const int b = free_.back();
  free_.pop_back();
  used_[static_cast<std::size_t>(b)] = true;
  return b;
}

void KvBlockPool::give(int block) {
  if (block < 0 || block >= blocks() || !used_[static_cast<std::size_t>(block)])
    throw Error("KvBlockPool", "block " + std::to_string(block) + " was not taken");
  used_[static_cast<std::size_t>(block)] = false;
  free_.push_back(block);
}

bool KvBlockPool::admit(int budget) {
  if (budget < 0) throw Error("KvBlockPool", "negative budget");
  if (promised_ + budget > static_cast<long long>(free_.size())) return false;
  promised_ += budget;
  return true;
}

void KvBlockPool::taken(int budget_left_before) {
  if (budget_left_before > 0) promised_--;
}

void KvBlockPool::retire(int budget_left) { promised_ -= std::max(budget_left, 0); }

void KvBlockPool::repromise(int n) {
  if (n < 0 || promised_ + n > static_cast<long long>(free_.size())) throw Error("KvBlockPool", "cannot promise " + std::to_string(n) + " blocks again");
  promised_ += n;
}

void take_blocks(KvBlockPool& pool, std::span<PagedSlot* const> slots, std::span<const int> lens) {
  if (lens.size() != slots.size()) throw Error("take_blocks: slots and lengths sizes disagree");
  auto lacking = [&](std::size_t i) {
    return std::max(pool.blocks_for(lens[i] + 1) - static_cast<int>(slots[i]->blocks.size()), 0);
  };
  long long outside = 0;  // blocks this step takes outside every promise
  for (std::size_t i = 0; i < slots.size(); ++i) outside += std::max(lacking(i) - slots[i]->budget_left, 0);
  if (outside > pool.free_blocks() - pool.promised())
    throw Error("paged KV: out of KV blocks (" + std::to_string(pool.free_blocks()) + " free, " + std::to_string(pool.promised()) +
                " promised to admitted candidates, " + std::to_string(outside) + " needed); admit candidates with try_add_slot");
  for (std::size_t i = 0; i < slots.size(); ++i) {
    PagedSlot& s = *slots[i];
    for (int n = lacking(i); n > 0; --n) {
      const int b = pool.take();
      if (b < 0) throw Error("paged KV: the block pool ran dry inside a promise (a bug)");
      pool.taken(s.budget_left);
      s.budget_left = std::max(s.budget_left - 1, 0);
      s.blocks.push_back(b);
    }
  }
}

void shrink_blocks(KvBlockPool& pool, PagedSlot& slot, int rows) {
  const auto keep = static_cast<std::size_t>(pool.blocks_for(std::max(rows, 0)));
  while (slot.blocks.size() > keep) {
    pool.give(slot.blocks.back());
    slot.blocks.pop_back();
  }
  // budget_left is max(budget - blocks held, 0) (take_blocks keeps it so): what the blocks given
  // back free of that is promised again.
  const int left = std::max(slot.budget - static_cast<int>(slot.blocks.size()), 0);
  pool.repromise(left - slot.budget_left);
  slot.budget_left = left;
}

std::optional<FusedLinear> fuse_linears(std::span<const Linear* const> shards) {
  if (shards.empty()) return std::nullopt;
  const Linear& first = *shards.front();
  if (first.weight.dtype == DType::F16) return std::nullopt;  // the engine widens F16 on upload: kept apart
  FusedLinear f;
  f.dtype = first.weight.dtype;
  f.in = static_cast<int>(first.in_features());
  f.input_scale = first.input_scale.value_or(0.0f);
  bool same_tensor_scale = first.is_fp8() && first.weight_scale.size() == 1;
  for (const Linear* l : shards) {
    if (l->weight.dtype != f.dtype || l->in_features() != f.in) return std::nullopt;
    if (l->is_fp8()) {
      // One activation quantization serves every shard: the schemes must agree exactly.
      if (l->input_scale.has_value() != first.input_scale.has_value() || l->input_scale.value_or(0.0f) != f.input_scale)
        return std::nullopt;
      if (l->weight_scale.size() != 1 && l->weight_scale.size() != static_cast<std::size_t>(l->out_features()))
        throw Error(l->weight.name, "FP8 weight_scale of " + std::to_string(l->weight_scale.size()) + " values for " +
                                        std::to_string(l->out_features()) + " rows");
      same_tensor_scale = same_tensor_scale && l->weight_scale.size() == 1 && l->weight_scale[0] == first.weight_scale[0];
    }
  }
  const bool biased = std::any_of(shards.begin(), shards.end(), [](const Linear* l) { return !l->bias.empty(); });
  for (const Linear* l : shards) {
    f.outs.push_back(static_cast<int>(l->out_features()));
    if (biased && l->bias.empty()) f.bias.insert(f.bias.end(), static_cast<std::size_t>(l->out_features()), 0.0f);
    else f.bias.insert(f.bias.end(), l->bias.begin(), l->bias.end());
    f.weight.insert(f.weight.end(), l->weight.data, l->weight.data + l->weight.nbytes);
    if (!l->is_fp8() || same_tensor_scale) continue;
    if (l->weight_scale.size() == 1)
      f.weight_scale.insert(f.weight_scale.end(), static_cast<std::size_t>(l->out_features()), l->weight_scale[0]);
    else
      f.weight_scale.insert(f.weight_scale.end(), l->weight_scale.begin(), l->weight_scale.end());
  }
  if (same_tensor_scale) f.weight_scale = {first.weight_scale[0]};
  return f;
}

PrefillPassRows prefill_pass_rows(std::span<const PrefillSegment> pass, std::span<const int> lengths) {
  PrefillPassRows r;
  auto ends = [&](const PrefillSegment& s) { return s.end == lengths[s.prompt]; };
  for (std::size_t k = 0; k < pass.size(); ++k) {
    if (!ends(pass[k])) continue;
    if (r.ending == 0) r.first_ending = pass[k].prompt;
    if (pass[k].prompt != r.first_ending + static_cast<std::size_t>(r.ending))
      throw Error("prefill pass: the prompts ending in it are not consecutive");
    r.ending++;
    r.segment.push_back(static_cast<int>(k)), r.position.push_back(pass[k].end - 1);
  }
  for (std::size_t k = 0; k < pass.size(); ++k)
    for (int j = pass[k].begin; j < pass[k].end - (ends(pass[k]) ? 1 : 0); ++j) r.segment.push_back(static_cast<int>(k)), r.position.push_back(j);
  return r;
}

}  // namespace bestofn::cuda
