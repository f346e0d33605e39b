// The host's work per CUDA decode step, without a GPU: B slots over P prompts (default 2048 over
// 164, the HumanEval batch of issue 32), 32 layers, unpaged and paged (16-position blocks), every
// slot decoding every step with its suffix growing (a slot past 200 tokens starts over, as a new
// candidate would). Two ways, timed step by step in the same run:
//   "planner":   what StepProgrammer::prepare does on the host now (src/cuda/step_plan.h): each
//                row's descriptors gathered, the batch checked (stamps), grouped by prefix (flat),
//                the arrays written straight into the staging buffer;
//   "reference": a copy of the loop prepare_step ran before (c6ba6a2): duplicates by std::find,
//                6 x layers x B pointers built on the host, prefix groups in a std::map, the arrays
//                appended to a host vector and copied into the staging buffer.
// Both include the prefix grouping (--cuda-prefix-gemm; prefix_state_map itself, the same call
// either way, is left out) and, paged, taking a block where a row starts one. The staging buffer
// is plain memory here (pinned on the GPU). One JSON line per (way, paging): median, p90 and max
// microseconds per step, and the bytes staged per step.
//   bench_step_plan [--slots B] [--prompts P] [--layers L] [--steps N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "bestofn_version.h"
#include "cuda/cascade_plan.h"
#include "cuda/step_ahead.h"
#include "cuda/step_plan.h"

namespace {

using bestofn::cuda::KvLayout;
constexpr std::size_t kRowBytes = 2048;  // Llama 3.1 8B: 8 KV heads x 128, BF16
constexpr int kBlock = 16;
constexpr int kMaxSuffix = 200;

// A fake device allocation's layout (as CudaEngine lays out a KV part): per layer, cap K rows then
// cap V rows. The reference reads its per-layer addresses from vectors, as the old engine read
// them from its per-layer buffers.
struct Part {
  std::uint64_t base = 0;
  int cap = 0, len = 0;
  std::vector<std::uint16_t*> k, v;  // the reference's per-layer buffers
};

struct Slot {
  int prefix = 0;
  Part kv;
  std::vector<int> blocks;
};

struct World {
  int L;
  bool paged;
  std::vector<std::unique_ptr<Part>> prefixes;
  std::vector<std::unique_ptr<Slot>> slots;
  Part pool;
  int next_block = 0;

  World(int B, int P, int layers, bool paged_kv) : L(layers), paged(paged_kv) {
    std::mt19937_64 rng(1);
    std::uint64_t next = 0x7f0000000000ull;
    auto make = [&](Part& p, int cap, int len) {
      p.base = next, p.cap = cap, p.len = len;
      next += 2 * static_cast<std::uint64_t>(L) * static_cast<std::uint64_t>(cap) * kRowBytes;
      for (int l = 0; l < L; ++l) {
        p.k.push_back(reinterpret_cast<std::uint16_t*>(p.base + 2 * static_cast<std::uint64_t>(l) * static_cast<std::uint64_t>(cap) * kRowBytes));
        p.v.push_back(reinterpret_cast<std::uint16_t*>(p.base + (2 * static_cast<std::uint64_t>(l) + 1) * static_cast<std::uint64_t>(cap) * kRowBytes));
      }
    };
    for (int p = 0; p < P; ++p) {
      prefixes.push_back(std::make_unique<Part>());
      const int len = 100 + static_cast<int>(rng() % 400);
      make(*prefixes.back(), len, len);
    }
    make(pool, 1 << 20, 0);
    for (int s = 0; s < B; ++s) {
      slots.push_back(std::make_unique<Slot>());
      Slot& slot = *slots.back();
      slot.prefix = s % P;
      make(slot.kv, 256, static_cast<int>(rng() % kMaxSuffix));
      for (int b = 0; b <= slot.kv.len / kBlock; ++b) slot.blocks.push_back(next_block++ % (1 << 16));
    }
  }
  // After a step: every row one longer.
  void grow() {
    for (auto& s : slots) ++s->kv.len;
  }
  // The scheduler's changes: a slot past kMaxSuffix finishes and a new candidate takes its handle
  // (HandleTable reuses it), fed from the end of the batch, as the scheduler admits.
  void churn(std::vector<int>& order, bestofn::cuda::StepAhead* ahead) {
    std::vector<int> restarted;
    std::size_t kept = 0;
    for (int h : order) {
      Slot& s = *slots[static_cast<std::size_t>(h)];
      if (s.kv.len < kMaxSuffix) {
        order[kept++] = h;
        continue;
      }
      s.kv.len = 0, s.blocks.assign(1, next_block++ % (1 << 16));
      if (ahead) ahead->forget(h);
      restarted.push_back(h);
    }
    order.resize(kept);
    order.insert(order.end(), restarted.begin(), restarted.end());
  }
  // The block a row's next position needs (both ways take it the same way).
  void take_blocks(const std::vector<Slot*>& batch) {
    for (Slot* s : batch)
      if (s->kv.len / kBlock >= static_cast<int>(s->blocks.size())) s->blocks.push_back(next_block++ % (1 << 16));
  }
  KvLayout layout(const Part& p) const {
    const std::uint64_t half = static_cast<std::uint64_t>(p.cap) * kRowBytes;
    return {p.base, p.base + half, 2 * half};
  }
};

// The planner's way, as StepProgrammer::prepare runs it (the engine's handle lookups, reserve and take included).
std::size_t planner_step(World& w, bestofn::cuda::StepPlanner& planner, std::vector<bestofn::cuda::StepRow>& rows,
                         const std::vector<int>& slot_ids, const std::vector<int>& tokens, std::vector<char>& staging,
                         bool group = true) {
  const std::size_t n = slot_ids.size();
  rows.resize(n);
  std::vector<Slot*> batch(n);
  for (std::size_t i = 0; i < n; ++i) {
    Slot& slot = *w.slots.at(static_cast<std::size_t>(slot_ids[i]));
    const Part& pre = *w.prefixes.at(static_cast<std::size_t>(slot.prefix));
    bestofn::cuda::StepRow& r = rows[i];
    r.slot = slot_ids[i], r.prefix = slot.prefix, r.prefix_len = pre.len, r.suffix_len = slot.kv.len, r.token = tokens[i];
    r.prefix_kv = w.layout(pre);
    batch[i] = &slot;
  }
  planner.check(rows);
  if (w.paged) {
    w.take_blocks(batch);
    const KvLayout pools = w.layout(w.pool);
    for (std::size_t i = 0; i < n; ++i) rows[i].suffix_kv = pools, rows[i].blocks = batch[i]->blocks;
  } else {
    for (std::size_t i = 0; i < n; ++i) rows[i].suffix_kv = w.layout(batch[i]->kv);
  }
  if (group) {
    const bestofn::cuda::StepGroups& g = planner.group(rows);
    std::vector<std::vector<int>> group_rows(g.size());
    for (std::size_t i = 0; i < g.size(); ++i) group_rows[i].assign(g.rows_of(i).begin(), g.rows_of(i).end());
  }
  const bestofn::cuda::StepLayout lay = planner.layout(static_cast<int>(n), false, false, planner.table_entries(rows));
  if (staging.size() < lay.capacity) staging.resize(lay.capacity);
  planner.write(rows, lay, nullptr, {}, staging.data());
  return lay.bytes;
}

// The engine's way with step t+1 prepared while step t runs (src/cuda/step_ahead.h).
struct Ahead {
  explicit Ahead(const bestofn::cuda::StepPlanner& p) : ahead(p) {}
  bestofn::cuda::StepAhead ahead;
  std::vector<Slot*> spec_batch, batch;
  std::vector<bestofn::cuda::StepRow> spec, fresh;
  std::vector<char> buf[2];
  int spec_buf = 0;
  long long in_place = 0, copied = 0, full = 0;
  long long exact = 0;  // batches exactly the speculated one (--cascade-attention's plan made ahead holds)
};
bestofn::cuda::StepRow row_of(World& w, Slot& slot, int handle, int token) {
  const Part& pre = *w.prefixes.at(static_cast<std::size_t>(slot.prefix));
  bestofn::cuda::StepRow r;
  r.slot = handle, r.prefix = slot.prefix, r.prefix_len = pre.len, r.suffix_len = slot.kv.len, r.token = token;
  r.prefix_kv = w.layout(pre);
  if (w.paged) w.take_blocks({&slot});
  r.suffix_kv = w.layout(w.paged ? w.pool : slot.kv);
  if (w.paged) r.blocks = slot.blocks;
  return r;
}
// What is left on the critical path once step t's ids are back: the batch matched against the
// speculation, the rows it lacks written fresh, the rest patched (the batch's slot pointers too, as
// the engine gathers them). A full plan where the speculation is of no use.
std::size_t ahead_step(World& w, bestofn::cuda::StepPlanner& planner, Ahead& a, std::vector<bestofn::cuda::StepRow>& rows,
                       const std::vector<int>& slot_ids, const std::vector<int>& tokens) {
  const bool matched = a.ahead.match(slot_ids, tokens);
  a.exact += a.ahead.exact() ? 1 : 0;
  if (!matched) {
    a.full++;
    auto& out = a.buf[a.spec_buf ^ 1];
    return planner_step(w, planner, rows, slot_ids, tokens, out, false);
  }
  const std::span<const int> src = a.ahead.source();
  a.batch.resize(slot_ids.size()), a.fresh.clear();
  for (std::size_t i = 0; i < slot_ids.size(); ++i) {
    if (src[i] >= 0) {
      a.batch[i] = a.spec_batch[static_cast<std::size_t>(src[i])];
      continue;
    }
    Slot& slot = *w.slots.at(static_cast<std::size_t>(slot_ids[i]));
    a.batch[i] = &slot;
    a.fresh.push_back(row_of(w, slot, slot_ids[i], tokens[i]));
  }
  if (!a.fresh.empty()) planner.check(a.fresh);
  const bestofn::cuda::StepLayout lay = a.ahead.layout(a.fresh, false);
  const bool inside = a.ahead.in_place(a.fresh, lay);
  std::vector<char>& out = a.buf[inside ? a.spec_buf : a.spec_buf ^ 1];
  if (out.size() < lay.capacity) out.resize(lay.capacity);
  a.ahead.patch(a.fresh, tokens, nullptr, lay, out.data());
  (inside ? a.in_place : a.copied)++;
  return lay.bytes;
}
// While step t runs: step t + 1 as every row one further, blocks taken ahead.
void speculate(World& w, Ahead& a, const std::vector<int>& slot_ids) {
  a.spec.clear(), a.spec_batch.clear();
  for (int h : slot_ids) {
    Slot& slot = *w.slots.at(static_cast<std::size_t>(h));
    a.spec.push_back(row_of(w, slot, h, 0));
    a.spec_batch.push_back(&slot);
  }
  a.spec_buf ^= 1;
  std::vector<char>& out = a.buf[a.spec_buf];
  if (out.size() < (std::size_t{1} << 22)) out.resize(std::size_t{1} << 22);
  a.ahead.speculate(a.spec, false, out.data());
}

// The reference: the host loop of prepare_step at c6ba6a2, over the same world.
template <typename T>
std::size_t add(std::vector<char>& host, const std::vector<T>& v) {
  const std::size_t off = (host.size() + 15) / 16 * 16;
  host.resize(off + v.size() * sizeof(T));
  if (!v.empty()) std::memcpy(host.data() + off, v.data(), v.size() * sizeof(T));
  return off;
}
std::size_t reference_step(World& w, const std::vector<int>& slot_ids, const std::vector<int>& tokens, std::vector<char>& host,
                           std::vector<char>& staging) {
  const int T = static_cast<int>(slot_ids.size());
  std::vector<Slot*> batch;
  std::vector<int> pos;
  for (int i = 0; i < T; ++i) {
    Slot& slot = *w.slots.at(static_cast<std::size_t>(slot_ids[static_cast<std::size_t>(i)]));
    if (std::find(batch.begin(), batch.end(), &slot) != batch.end()) throw std::runtime_error("a slot twice");
    const int p = w.prefixes.at(static_cast<std::size_t>(slot.prefix))->len + slot.kv.len;
    if (p >= 131072) throw std::runtime_error("context");
    if (tokens[static_cast<std::size_t>(i)] < 0) throw std::runtime_error("token");
    batch.push_back(&slot);
    pos.push_back(p);
  }
  std::vector<int> tables, starts;
  if (w.paged) {
    w.take_blocks(batch);
    for (const Slot* s : batch) starts.push_back(static_cast<int>(tables.size())), tables.insert(tables.end(), s->blocks.begin(), s->blocks.end());
  }
  const auto n = static_cast<std::size_t>(T);
  host.clear();
  std::vector<std::size_t> off;
  off.push_back(add(host, tokens));
  off.push_back(add(host, pos));
  std::vector<int> lens(2 * n);
  for (std::size_t i = 0; i < n; ++i) lens[i] = w.prefixes.at(static_cast<std::size_t>(batch[i]->prefix))->len, lens[n + i] = batch[i]->kv.len + 1;
  off.push_back(add(host, lens));
  std::map<int, std::vector<int>> by_prefix;
  for (int i = 0; i < T; ++i) by_prefix[batch[static_cast<std::size_t>(i)]->prefix].push_back(i);
  std::vector<std::vector<int>> group_rows;
  for (auto& [p, r] : by_prefix) group_rows.push_back(std::move(r));
  const auto L = static_cast<std::size_t>(w.L);
  std::vector<std::uint16_t*> rows(2 * L * n);
  std::vector<const std::uint16_t*> ptrs(4 * L * n);
  for (std::size_t l = 0; l < L; ++l)
    for (std::size_t i = 0; i < n; ++i) {
      Slot& slot = *batch[i];
      const Part& pre = *w.prefixes.at(static_cast<std::size_t>(slot.prefix));
      std::uint16_t* ks = w.paged ? w.pool.k[l] : slot.kv.k[l];
      std::uint16_t* vs = w.paged ? w.pool.v[l] : slot.kv.v[l];
      const std::size_t j = static_cast<std::size_t>(slot.kv.len);
      const std::size_t row = (w.paged ? static_cast<std::size_t>(slot.blocks[j / kBlock]) * kBlock + j % kBlock : j) * kRowBytes;
      rows[2 * l * n + i] = reinterpret_cast<std::uint16_t*>(reinterpret_cast<unsigned char*>(ks) + row);
      rows[(2 * l + 1) * n + i] = reinterpret_cast<std::uint16_t*>(reinterpret_cast<unsigned char*>(vs) + row);
      const std::size_t at = 4 * l * n;
      ptrs[at + i] = pre.k[l];
      ptrs[at + n + i] = pre.v[l];
      ptrs[at + 2 * n + i] = ks;
      ptrs[at + 3 * n + i] = vs;
    }
  off.push_back(add(host, rows));
  off.push_back(add(host, ptrs));
  if (w.paged) {
    starts.insert(starts.end(), tables.begin(), tables.end());
    off.push_back(add(host, starts));
  }
  if (staging.size() < host.size()) staging.resize(host.size());
  std::memcpy(staging.data(), host.data(), host.size());  // StepArena::upload's copy into pinned memory
  return host.size();
}

double percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<std::size_t>(q * static_cast<double>(v.size())))];
}

}  // namespace

int main(int argc, char** argv) {
  int B = 2048, P = 164, L = 32, steps = 400;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    const int v = std::stoi(argv[i + 1]);
    if (a == "--slots") B = v;
    else if (a == "--prompts") P = v;
    else if (a == "--layers") L = v;
    else if (a == "--steps") steps = v;
  }
  std::string command;
  for (int i = 0; i < argc; ++i) {
    if (i) command += ' ';
    command += argv[i];
  }
  using Clock = std::chrono::steady_clock;
  std::map<std::pair<bool, std::string>, double> median;
  for (const bool paged : {false, true})
    for (const std::string way : {"planner", "reference", "full", "ahead"}) {
      World w(B, P, L, paged);
      bestofn::cuda::StepPlanConfig c;
      c.n_layers = L, c.vocab = 128256, c.max_positions = 131072, c.row_bytes = kRowBytes;
      c.block_tokens = paged ? kBlock : 0;
      c.table_capacity = paged ? (1u << 16) + 1 : 0;
      bestofn::cuda::StepPlanner planner(c);
      Ahead ahead(planner);
      std::vector<bestofn::cuda::StepRow> rows;
      std::vector<char> host, staging;
      // Slots in the order the scheduler feeds them (admission order), tokens arbitrary.
      std::vector<int> slot_ids(static_cast<std::size_t>(B)), tokens(static_cast<std::size_t>(B));
      for (int i = 0; i < B; ++i) slot_ids[static_cast<std::size_t>(i)] = i, tokens[static_cast<std::size_t>(i)] = (i * 7919) % 128256;
      std::vector<double> us, off_us;
      std::size_t bytes = 0;
      for (int s = 0; s < steps + 20; ++s) {
        const auto t0 = Clock::now();
        if (way == "ahead") bytes = ahead_step(w, planner, ahead, rows, slot_ids, tokens);
        else if (way == "reference") bytes = reference_step(w, slot_ids, tokens, host, staging);
        else bytes = planner_step(w, planner, rows, slot_ids, tokens, staging, way == "planner");
        const double t = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
        if (s >= 20) us.push_back(t);  // the first steps grow the buffers
        w.grow();  // the step ran; step t + 1 is speculated while it runs
        if (way == "ahead") {
          const auto t1 = Clock::now();
          speculate(w, ahead, slot_ids);
          if (s >= 20) off_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t1).count());
        }
        w.churn(slot_ids, way == "ahead" ? &ahead.ahead : nullptr);
      }
      median[{paged, way}] = percentile(us, 0.5);
      nlohmann::json line = {{"bench", "step_plan"}, {"way", way}, {"paged", paged}, {"slots", B}, {"prompts", P},
                             {"layers", L}, {"steps", steps}, {"median_us", percentile(us, 0.5)},
                             {"p90_us", percentile(us, 0.9)}, {"max_us", *std::max_element(us.begin(), us.end())},
                             {"bytes_staged", bytes}, {"bound_us", 500}, {"commit", BESTOFN_COMMIT}, {"command", command}};
      if (way == "ahead") {
        // The critical path against today's full plan (the default path: no prefix grouping), same run.
        line["critical_path"] = "after the ids return: match, fresh rows, patch";
        line["full_median_us"] = median[{paged, "full"}];
        line["speedup_vs_full"] = median[{paged, "full"}] / std::max(percentile(us, 0.5), 1e-3);
        line["off_path_median_us"] = percentile(off_us, 0.5);
        line["patched_in_place"] = ahead.in_place, line["patched_copied"] = ahead.copied, line["full_plans"] = ahead.full;
        // --cascade-attention's plan for step t + 1 is made during step t too, but used only for a
        // batch that is exactly the speculated one: with rows finishing every step, rarely.
        line["exact_batches"] = ahead.exact;
      }
      std::printf("%s\n", line.dump().c_str());
      std::fflush(stdout);
    }
  // --cascade-attention adds its own host plan per step (src/cuda/cascade_plan.h: the rows grouped
  // by prompt, the permutation, the page tables of each group; with --paged-kv the suffixes' page
  // table from the slots' block tables, each suffix 1..200 positions; the ints written at their
  // layout's offsets), without and with --cuda-graphs (the groups padded to the rows). FlashInfer's
  // PrefillPlan and DecodePlan, which follow it on the GPU machine, need the CUDA runtime and are
  // not timed here.
  {
    const int pages_per_prompt = (130 + 15) / 16, pool_pages = P * pages_per_prompt;
    std::vector<bestofn::cuda::CascadeRow> rows(static_cast<std::size_t>(B));
    std::vector<std::vector<int>> tables(static_cast<std::size_t>(B));
    std::mt19937_64 rng(7);
    for (int i = 0; i < B; ++i) {
      const int p = static_cast<int>(static_cast<long long>(i) * P / B);
      rows[static_cast<std::size_t>(i)] = {p, p * pages_per_prompt, 130};
      for (int b = 0; b < (kMaxSuffix + kBlock - 1) / kBlock; ++b) tables[static_cast<std::size_t>(i)].push_back(i * 13 + b);
    }
    const int pool_blocks = B * 13;
    std::vector<int> lens(static_cast<std::size_t>(B));
    for (int& n : lens) n = 1 + static_cast<int>(rng() % kMaxSuffix);
    std::vector<int> out;
    for (const bool graphs : {false, true})
      for (const bool paged : {false, true}) {
        std::vector<double> us;
        std::size_t ints = 0;
        for (int s = 0; s < steps + 20; ++s) {
          const auto t0 = Clock::now();
          std::vector<bestofn::cuda::SuffixRow> suffix;
          if (paged)
            for (std::size_t i = 0; i < rows.size(); ++i) suffix.push_back({tables[i], lens[i]});
          const bestofn::cuda::CascadeStep c = bestofn::cuda::cascade_step(rows, 32, 8, 16, pool_pages, graphs ? B : 0, 0);
          const bestofn::cuda::SuffixPages sp = paged ? bestofn::cuda::suffix_pages(suffix, 16, pool_blocks) : bestofn::cuda::SuffixPages{};
          const bestofn::cuda::CascadeLayout lay = bestofn::cuda::cascade_layout(B, static_cast<std::size_t>(pool_pages + B),
                                                                                paged ? static_cast<std::size_t>(pool_blocks) : 0);
          out.resize(lay.size);
          bestofn::cuda::write_cascade_ints(c, paged ? &sp : nullptr, lay, out.data());
          const double t = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
          ints = c.order.size() + c.map.size() + c.qo_indptr.size() + c.page_indptr.size() + c.last_page_len.size() + c.page_indices.size() +
                 sp.indptr.size() + sp.indices.size() + sp.last_page_len.size();
          if (s >= 20) us.push_back(t);
          for (int& n : lens) n = n % kMaxSuffix + 1;  // every suffix one longer (a new candidate past 200)
        }
        const nlohmann::json line = {{"bench", "step_plan"}, {"way", "cascade_step"}, {"graphs", graphs}, {"paged", paged},
                                     {"slots", B}, {"prompts", P}, {"steps", steps}, {"median_us", percentile(us, 0.5)},
                                     {"p90_us", percentile(us, 0.9)}, {"max_us", *std::max_element(us.begin(), us.end())},
                                     {"bytes_staged", ints * sizeof(int)},
                                     {"note", "every row's prompt of 130 positions, suffixes 1..200; FlashInfer's plans not included"},
                                     {"commit", BESTOFN_COMMIT}, {"command", command}};
        std::printf("%s\n", line.dump().c_str());
      }
  }
  return 0;
}
