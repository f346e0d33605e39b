// The CUDA engine: the same forward as src/cpu/cpu_engine.cpp, step comment for step comment, on
// the device. Weights are uploaded once; linear layers are cuBLASLt GEMMs (FP8 E4M3 with the
// activation/weight scales applied in an epilogue, or BF16 / F32); the KV cache is BF16, or FP8
// with a scale per position and KV head (FP8 KV cache).
// The class is in cuda_engine.h; a decode step is in cuda_step.cpp.
#include "cuda/cuda_engine.h"

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <spdlog/spdlog.h>

#include "bestofn/model/rope.h"
#include "bestofn/engine/cuda_run.h"
#include "cuda/ceilings.h"
#include "cuda/cuda_api.h"
#include "cuda/kernels.h"
#include "cuda/small_m_linear.h"

namespace bestofn::cuda {

CudaEngine::CudaEngine(std::shared_ptr<const Weights> w, const EngineOptions& opt)
    : Engine("cuda", w->config), w_(std::move(w)), c_(w_->config), options_(opt.cuda) {
  statistics_ = this;
  std::string why;
  const std::size_t visible = list_devices(&why).size();
  if (visible == 0) throw Error("no CUDA device is visible (" + why + ")");
  if (opt.cuda.device_index < 0 || static_cast<std::size_t>(opt.cuda.device_index) >= visible)
    throw Error("CUDA device " + std::to_string(opt.cuda.device_index) + " is not visible: this process sees " + std::to_string(visible) +
                " device(s), numbered from 0 within CUDA_VISIBLE_DEVICES");
  // A combination of options that cannot run: refused in one place (bestofn/engine/cuda_run.h),
  // which the path policy also asks.
  const CudaRun run = cuda_run(*w_, opt.kv, {}, device_capability(opt.cuda.device_index), cascade_built());
  if (const std::string no = cuda_refusal(opt.cuda, run); !no.empty()) throw Error(no);
  if (opt.kv == EngineOptions::Kv::FP8) {
    // Every path reads FP8 rows: the decode kernels (plain, split, tiled), prefill, paged KV's
    // blocks, and the prefix GEMMs (their K/V widened to F32 from the FP8 rows).
    if (!rope_kv_fp8_fits(c_.n_kv_heads, c_.head_dim))
      throw Error("an FP8 KV cache needs n_kv_heads x head_dim a multiple of 4 (the scales after the codes) and at most " +
                  std::to_string(kMaxFp8KvDim) + ", got " + std::to_string(c_.kv_dim()));
    kv_cache_ = EngineOptions::Kv::FP8;
  }
  device_ = opt.cuda.device_index;
  use_device();
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  stream_owner_.reset(stream_);
  if (opt.cuda.gemm_autotune) algo_cache_ = std::make_unique<GemmAlgoCache>(GemmAlgoCache::default_file());
  gemm_ = std::make_unique<Gemm>(stream_, algo_cache_.get());
  timer_.set_stream(stream_);
  if (opt.cuda.graphs) graphs_ = std::make_unique<GraphCache>();
  CUDA_CHECK(cudaDeviceGetAttribute(&sm_count_, cudaDevAttrMultiProcessorCount, device_));
  // Upload every weight once.
  embed_ = upload(w_->token_embedding);
  final_norm_ = upload(w_->final_norm);
  // A tied lm_head is the embedding: uploaded once.
  const bool tied = w_->lm_head.weight.data == w_->token_embedding.data;
  lm_head_ = tied ? DevLinear{} : upload(w_->lm_head);
  if (tied) {
    lm_head_.out = c_.vocab_size, lm_head_.in = c_.dim;
    lm_head_.type = embed_.dtype == DType::BF16 ? GemmInput::BF16 : GemmInput::F32;
  }
  for (const LayerWeights& L : w_->layers) layers_.push_back(upload(L, opt.cuda.fused_qkv));
  LinearSetup linear;
  linear.stream = stream_, linear.gemm = gemm_.get(), linear.timer = &timer_, linear.sm_count = sm_count_;
  linear.layers = layers_, linear.lm_head = &lm_head_;
  linear.dim = c_.dim, linear.hidden = c_.hidden_dim, linear.n_heads = c_.n_heads, linear.n_kv = c_.n_kv_heads, linear.hd = c_.head_dim;
  linear.kv = kv_format();
  linear_ = make_linear_path(opt.cuda, linear);
  // CUDA graphs pad batches to their bucket: the paged pool keeps one block aside for the
  // padding rows' writes (on top of the blocks asked for).
  if (opt.cuda.paged_kv) paged_ = std::make_unique<PagedKv>(c_.n_layers, kv_row_bytes(), opt.cuda.kv_blocks, opt.cuda.graphs);
  AttentionSetup attention;
  attention.stream = stream_;
  attention.n_layers = c_.n_layers, attention.n_heads = c_.n_heads, attention.n_kv = c_.n_kv_heads, attention.hd = c_.head_dim;
  attention.kv = kv_format(), attention.sm_count = sm_count_;
  // With small-M linear's fused layer the split attention's chunk states are merged in the
  // attention launch by its last block per row, not by a second launch.
  attention.split = opt.cuda.split_attention, attention.merge_inline = opt.cuda.small_m_linear && !opt.cuda.small_m_split;
  attention.graphs = graphs_ != nullptr;
  attention.paged = paged_.get();
  attention.prefix_of = [this](int p) -> const Prefix& { return p == kPaddingPrefix ? *padding_ : prefix_at(p); };
  attention_ = make_attention_path(opt.cuda, attention);
  // Speculation: runs of positions per slot as consecutive rows of one step (StepRow::run), every
  // row's K/V written before any row attends, each attending to its slot up to its own position;
  // where the attention path takes them (not cascade or prefix-GEMM attention, whose plans group
  // rows per prompt).
  capabilities_.runs = attention_->can().runs;
  capabilities_.why_no_runs = capabilities_.runs ? "" : std::string("the cuda engine does not verify drafted tokens with ") + attention_->name();
  capabilities_.device_sampling = opt.cuda.device_sampling;
  const std::vector<float> inv = rope_inv_freq(c_);
  inv_freq_.resize(inv.size() * 4);
  inv_freq_.upload(inv.data(), inv.size() * 4);
  StepPlanConfig plan;
  plan.n_layers = c_.n_layers, plan.vocab = c_.vocab_size, plan.max_positions = c_.max_position_embeddings;
  plan.row_bytes = kv_row_bytes();
  if (paged_) plan.block_tokens = PagedKv::kBlockTokens, plan.table_capacity = static_cast<std::size_t>(paged_->blocks()) + 1;
  if (graphs_) {
    padding_ = std::make_unique<Prefix>();
    reserve(padding_->kv, 2);
    CUDA_CHECK(cudaMemsetAsync(padding_->kv.buf.get(), 0, padding_->kv.buf.size(), stream_));
    padding_->kv.len = 1;
    attention_->add_prefix(*padding_);
    plan.pad = true;
    plan.padding_prefix = padding_->kv.layout();
    const KvLayout one_row = {plan.padding_prefix.k + plan.row_bytes, plan.padding_prefix.v + plan.row_bytes, plan.padding_prefix.layer_stride};
    plan.padding_suffix = paged_ ? paged_->layout() : one_row;
    plan.scratch_block = paged_ ? paged_->scratch_block() : -1;
    sync_stream(stream_);
  }
  StepProgramSetup program;
  program.plan = plan, program.stream = stream_, program.arena = &arena_, program.pointers = &step_ptrs_;
  program.paged = paged_.get(), program.attention = attention_.get(), program.slots = &slots_, program.prefixes = &prefixes_;
  program.grow_suffix = [this](KvPart& part, int rows) { reserve(part, rows); };
  program.size_for = [this](int T, const SamplingParams* sampling) {
    size_for_bucket(T);
    // Device sampling: the sampler's workspace for these rows and parameters, grown here (outside
    // any capture) so that the sampler allocates nothing inside the step.
    if (sampling) sample_ws_.resize(sample_token_workspace_bytes(T, c_.vocab_size, *sampling));
  };
  program_ = std::make_unique<StepProgrammer>(program);
}

EngineDescription CudaEngine::describe() const {
  use_device();
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, device_));
  return {"cuda", prop.name, std::nullopt, options_};
}

void CudaEngine::scratch(int T) {
  if (T <= scratch_T_) return;
  const auto t = static_cast<std::size_t>(T);
  const auto d = static_cast<std::size_t>(c_.dim), qd = static_cast<std::size_t>(c_.q_dim()), kd = static_cast<std::size_t>(c_.kv_dim()),
             h = static_cast<std::size_t>(c_.hidden_dim);
  const std::size_t widest = std::max({d, qd, h});
  x_.resize(t * d * 4), xn_.resize(t * d * 4), o_.resize(t * d * 4);
  q_.resize(t * qd * 4), att_.resize(t * qd * 4), k_.resize(t * kd * 4), v_.resize(t * kd * 4);
  gate_.resize(t * h * 4), up_.resize(t * h * 4);
  act_q_.resize(t * widest), act_s_.resize(t * 4), act_bf16_.resize(t * widest * 2);
  fused_.resize(t * std::max(qd + 2 * kd, 2 * h) * 4);
  attention_->size_rows(T);
  linear_->size_rows(T);
  scratch_T_ = T;
}

void CudaEngine::size_for_bucket(int T) {
  const int n = bucket_of(T);
  if (n <= sized_bucket_T_) return;
  const auto t = static_cast<std::size_t>(n);
  scratch(n);
  logits_.resize(t * static_cast<std::size_t>(c_.vocab_size) * 4);
  if (capabilities_.device_sampling) samples_.resize(t * 8), pinned_.resize(t * 8);
  step_ptrs_.resize(6 * static_cast<std::size_t>(c_.n_layers) * t * sizeof(void*));
  // Every bucket's step arena up to this one: a step that shrinks as candidates finish (or after a
  // wider step of drafted runs) allocates nothing.
  for (int b = 1; b <= n; b = bucket_of(b + 1)) arena_.reserve(b, program_->capacity(b, capabilities_.device_sampling));
  sized_bucket_T_ = n;
}

void CudaEngine::reserve(const RunShape& shape) {
  use_device();
  const int bucket = bucket_of(std::max(shape.max_batch, 1));
  size_for_bucket(bucket);
  program_->reserve_staging(bucket, capabilities_.device_sampling);
  if (capabilities_.device_sampling && shape.sampling) sample_ws_.resize(sample_token_workspace_bytes(bucket, c_.vocab_size, *shape.sampling));
  // Prefill: a pass's activations, the logits of one prefill_many, its index arrays (bounded by
  // prefill_arena_bytes) in the prefill staging buffer.
  const int pass = std::min({std::max(shape.prefill_tokens, 1), kMaxPrefillPassRows, std::max(shape.prefill_rows, 1)});
  scratch(std::max(bucket, pass));
  logits_.resize(static_cast<std::size_t>(std::max(bucket, 1)) * static_cast<std::size_t>(c_.vocab_size) * 4);
  prefill_logits_.resize(static_cast<std::size_t>(std::max(shape.prefill_prompts, 1)) * static_cast<std::size_t>(c_.vocab_size) * 4);
  arena_.reserve_prefill(prefill_arena_bytes(std::max(shape.prefill_rows, shape.longest_prompt), shape.prefill_prompts, pass, c_.n_layers));
  reserve_prefix_parts(shape.prompt_lengths);
  attention_->reserve(bucket, shape.longest_prompt);  // after the prompts' parts (cascade attention's layout counts its pages)
  // Unpaged: a part of max_new_tokens rows (what a candidate feeds, and one for the speculation)
  // for each slot of the largest batch.
  if (!paged_) {
    reserved_rows_ = std::min(std::max(shape.max_new_tokens, 1), c_.max_position_embeddings);
    for (auto& part : free_suffix_parts_) reserve(part, reserved_rows_, true);
    while (static_cast<int>(free_suffix_parts_.size()) < shape.max_batch) {
      free_suffix_parts_.emplace_back();
      reserve(free_suffix_parts_.back(), reserved_rows_, true);
    }
  }
}

// A KV part per prompt of the run, each the prompt's length, shortest first within a quarter of the
// device memory free now (a run with more allocates the rest at their prefill, counted); and what
// the attention path keeps ready for them (prefix-GEMM attention's F32 copies, cascade attention's
// pages). Parts of an earlier run are dropped first.
void CudaEngine::reserve_prefix_parts(const std::vector<int>& lengths) {
  prefix_parts_.clear();
  attention_->reserve_prefixes({});
  std::size_t free_bytes = 0, total_bytes = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  const std::size_t row = 2 * static_cast<std::size_t>(c_.n_layers) * kv_row_bytes() + attention_->prefix_bytes_per_position();
  const std::vector<int> reserved = reserved_part_lengths(lengths, static_cast<long long>(free_bytes / 4 / row));
  for (const int len : reserved) {
    KvPart part;
    reserve(part, len, true);
    prefix_parts_.put(len, std::move(part));
  }
  attention_->reserve_prefixes(reserved);
  prefix_parts_on_ = true;
}

KvPart CudaEngine::take_prefix_part(int rows) {
  if (auto part = prefix_parts_.take(rows)) {
    part->len = 0;
    return std::move(*part);
  }
  KvPart part;
  reserve(part, rows);
  return part;
}

// Grows a part keeping its rows: the 2 x layers runs of `len` rows (K and V of each layer) move
// from a stride of the old capacity to one of the new, one 2-D copy.
void CudaEngine::reserve(KvPart& part, int rows, bool exact) {
  if (rows <= part.capacity) return;
  const int cap = exact ? rows : std::max(rows, std::max(16, part.capacity * 2));
  const std::size_t rb = kv_row_bytes();
  DeviceBuffer fresh(2 * static_cast<std::size_t>(c_.n_layers) * static_cast<std::size_t>(cap) * rb);
  if (part.len > 0)
    CUDA_CHECK(cudaMemcpy2DAsync(fresh.get(), static_cast<std::size_t>(cap) * rb, part.buf.get(), static_cast<std::size_t>(part.capacity) * rb,
                                 static_cast<std::size_t>(part.len) * rb, 2 * static_cast<std::size_t>(c_.n_layers),
                                 cudaMemcpyDeviceToDevice, stream_));
  if (part.len > 0) sync_stream(stream_);  // the copy has left the old buffer before it is freed
  part.buf = std::move(fresh);
  part.row_bytes = rb;
  part.capacity = cap;
}

int CudaEngine::prefill(std::span<const int> tokens, std::span<float> last_logits) {
  use_device();
  const int T = static_cast<int>(tokens.size());
  if (T == 0) throw Error("prefill: empty prompt");
  if (T > c_.max_position_embeddings)
    throw Error("prompt of " + std::to_string(T) + " tokens is longer than the context (" + std::to_string(c_.max_position_embeddings) + ")");
  if (last_logits.size() != static_cast<std::size_t>(c_.vocab_size)) throw Error("prefill: logits buffer has the wrong size");
  for (int t : tokens)
    if (t < 0 || t >= c_.vocab_size) throw Error("token id " + std::to_string(t) + " is outside the vocabulary (" + std::to_string(c_.vocab_size) + ")");
  auto p = std::make_unique<Prefix>();
  p->kv = take_prefix_part(T);
  scratch(T);
  logits_.resize(static_cast<std::size_t>(c_.vocab_size) * 4);
  // The index arrays: ids, positions, then per layer the cache rows of each position.
  const auto n = static_cast<std::size_t>(T);
  std::vector<int> pos(n);
  for (int t = 0; t < T; ++t) pos[static_cast<std::size_t>(t)] = t;
  std::vector<std::uint16_t*> rows(2 * n * static_cast<std::size_t>(c_.n_layers));  // layer l: k rows at 2 l T, v rows after
  for (std::size_t l = 0; l < static_cast<std::size_t>(c_.n_layers); ++l)
    for (std::size_t t = 0; t < n; ++t) {
      rows[2 * l * n + t] = kv_row_at(p->kv.k(static_cast<int>(l)), t);
      rows[(2 * l + 1) * n + t] = kv_row_at(p->kv.v(static_cast<int>(l)), t);
    }
  arena_.clear();
  const std::size_t o_tokens = arena_.add(tokens.data(), n), o_pos = arena_.add(pos), o_rows = arena_.add(rows);
  arena_.upload(stream_);
  const int* d_pos = arena_.prefill_at<int>(o_pos);
  std::uint16_t* const* d_rows = arena_.prefill_at<std::uint16_t*>(o_rows);
  embedding_cuda(embed_.buf.get(), embed_.dtype, arena_.prefill_at<int>(o_tokens), T, c_.dim, x_.get<float>(), stream_);
  for (int l = 0; l < c_.n_layers; ++l) {
    const auto li = static_cast<std::size_t>(l);
    layer(l, T, d_pos, d_rows + 2 * li * n, d_rows + (2 * li + 1) * n, [&] {
      prefill_attention_cuda(q_.get<float>(), p->kv.k(l), p->kv.v(l), T, c_.n_heads,
                             c_.n_kv_heads, c_.head_dim, att_.get<float>(), stream_, kv_format());
    });
  }
  try {
    finish_prefix(*p, T);
    logits_rows(T - 1, 1);
    CUDA_CHECK(cudaMemcpyAsync(last_logits.data(), logits_.get(), last_logits.size() * 4, cudaMemcpyDeviceToHost, stream_));
    sync_stream(stream_);
  } catch (...) {
    attention_->release_prefix(*p, false);
    throw;
  }
  return prefixes_.put(std::move(p));
}

void CudaEngine::finish_prefix(Prefix& p, int len) {
  p.kv.len = len;
  attention_->add_prefix(p);
}

// Batched, chunked prefill. Each pass's rows are laid out with the last rows of the prompts that
// end in it first (in prompt order), then the other rows (prefill_pass_rows): the logits are then
// those of the pass's first m rows, with no gather, written straight into those prompts' rows of
// prefill_logits_.
// Row order does not matter to the rest of the forward: the GEMMs and the row ops treat rows
// alike, rope_kv_write_cuda writes each row to the cache row it is given, and the attention finds
// each row's prompt and position in its own tables. The index arrays of every pass go up in one
// copy before the first pass; nothing waits on the device until the logits come back.
std::vector<int> CudaEngine::prefill_many(std::span<const std::span<const int>> prompts, std::span<float> last_logits,
                                          int max_pass_tokens) {
  use_device();
  check_prefill_many(c_, prompts, last_logits.size(), max_pass_tokens);
  if (prompts.empty()) return {};
  const auto layers = static_cast<std::size_t>(c_.n_layers), V = static_cast<std::size_t>(c_.vocab_size);
  std::vector<int> lengths;
  std::vector<std::unique_ptr<Prefix>> made;  // registered once every pass has run: nothing is left behind by a throw
  for (const auto& tokens : prompts) {
    lengths.push_back(static_cast<int>(tokens.size()));
    made.push_back(std::make_unique<Prefix>());
    made.back()->kv = take_prefix_part(lengths.back());
  }
  // Per pass: ids, positions, segment of each row, then per layer the cache rows of each row (k,
  // then v) and the cache base of each segment (k, then v).
  struct Pass {
    int T = 0, S = 0, m = 0;  // rows, segments, prompts ending in it
    std::size_t first = 0;    // the first of those prompts
    std::size_t tokens = 0, pos = 0, seg = 0, rows = 0, bases = 0;  // offsets in arena_
  };
  std::vector<Pass> passes;
  int most = 0;
  arena_.clear();
  // At most 65535 rows a pass: the attention's grid (a longer prompt goes in chunks).
  for (const auto& plan : plan_prefill_passes(lengths, std::min(max_pass_tokens, kMaxPrefillPassRows))) {
    const PrefillPassRows layout = prefill_pass_rows(plan, lengths);
    Pass pass;
    pass.T = static_cast<int>(layout.segment.size()), pass.S = static_cast<int>(plan.size());
    pass.m = layout.ending, pass.first = layout.first_ending;
    const auto T = layout.segment.size(), S = plan.size();
    std::vector<int> tokens(T);
    std::vector<std::uint16_t*> rows(2 * layers * T);   // layer l: k rows at 2 l T, v rows after
    std::vector<std::uint16_t*> bases(2 * layers * S);  // layer l: k bases at 2 l S, v bases after
    for (std::size_t t = 0; t < T; ++t) {
      const std::size_t p = plan[static_cast<std::size_t>(layout.segment[t])].prompt, j = static_cast<std::size_t>(layout.position[t]);
      tokens[t] = prompts[p][j];
      for (std::size_t l = 0; l < layers; ++l) {
        const KvPart& kv = made[p]->kv;
        rows[2 * l * T + t] = kv_row_at(kv.k(static_cast<int>(l)), j);
        rows[(2 * l + 1) * T + t] = kv_row_at(kv.v(static_cast<int>(l)), j);
      }
    }
    for (std::size_t k = 0; k < S; ++k)
      for (std::size_t l = 0; l < layers; ++l) {
        bases[2 * l * S + k] = made[plan[k].prompt]->kv.k(static_cast<int>(l));
        bases[(2 * l + 1) * S + k] = made[plan[k].prompt]->kv.v(static_cast<int>(l));
      }
    pass.tokens = arena_.add(tokens), pass.pos = arena_.add(layout.position), pass.seg = arena_.add(layout.segment);
    pass.rows = arena_.add(rows), pass.bases = arena_.add(bases);
    passes.push_back(pass);
    most = std::max(most, pass.T);
  }
  arena_.upload(stream_);
  scratch(most);
  prefill_logits_.resize(prompts.size() * V * 4);
  for (const Pass& pass : passes) {
    const auto T = static_cast<std::size_t>(pass.T), S = static_cast<std::size_t>(pass.S);
    const int* d_pos = arena_.prefill_at<int>(pass.pos);
    const int* d_seg = arena_.prefill_at<int>(pass.seg);
    std::uint16_t* const* d_rows = arena_.prefill_at<std::uint16_t*>(pass.rows);
    const std::uint16_t* const* d_bases = arena_.prefill_at<const std::uint16_t*>(pass.bases);
    embedding_cuda(embed_.buf.get(), embed_.dtype, arena_.prefill_at<int>(pass.tokens), pass.T, c_.dim, x_.get<float>(), stream_);
    for (int l = 0; l < c_.n_layers; ++l) {
      const auto li = static_cast<std::size_t>(l);
      layer(l, pass.T, d_pos, d_rows + 2 * li * T, d_rows + (2 * li + 1) * T, [&] {
        prefill_attention_segments_cuda(q_.get<float>(), d_bases + 2 * li * S, d_bases + (2 * li + 1) * S, d_seg, d_pos, pass.T,
                                        c_.n_heads, c_.n_kv_heads, c_.head_dim, att_.get<float>(), stream_, kv_format());
      });
    }
    if (pass.m > 0) logits_rows(0, pass.m, prefill_logits_.get<float>() + pass.first * V);
  }
  try {
    for (std::size_t p = 0; p < made.size(); ++p) finish_prefix(*made[p], lengths[p]);
    CUDA_CHECK(cudaMemcpyAsync(last_logits.data(), prefill_logits_.get(), last_logits.size() * 4, cudaMemcpyDeviceToHost, stream_));
    sync_stream(stream_);
  } catch (...) {
    for (auto& p : made) attention_->release_prefix(*p, false);  // a prompt dropped before it was registered
    throw;
  }
  std::vector<int> ids;
  for (auto& p : made) ids.push_back(prefixes_.put(std::move(p)));
  return ids;
}

EngineStatistics::Ceilings CudaEngine::measure_ceilings() {
  use_device();
  const bool fp8 = layers_.empty() || layers_.front().wo.type == GemmInput::FP8;
  return measure_device_ceilings(*gemm_, fp8 ? GemmInput::FP8 : GemmInput::BF16, stream_);
}

std::unique_ptr<Engine> make_cuda_engine(std::shared_ptr<const Weights> weights, const EngineOptions& options) {
  return std::make_unique<CudaEngine>(std::move(weights), options);
}

}  // namespace bestofn::cuda
