// bestofn bench's flags and usage checks; the measurement is run_bench (bestofn/generate/bench.h).
#include <memory>

#include "bestofn/generate/bench.h"
#include "cli/commands.h"
#include "cli/model_flags.h"
#include "cli/validators.h"

namespace bestofn::cli {

Runner add_bench(CLI::App& app, const std::string& command) {
  auto o = std::make_shared<BenchOptions>();
  auto* sub = app.add_subcommand("bench", "Decode speed against the number of candidates N, as JSON lines");
  sub->footer(
      "For each N: prefill one random prompt of --prompt-len tokens, add N candidates on it, then\n"
      "time --steps decode steps (after 2 warm-up steps). Reports ms per step, tok/s, prefill ms,\n"
      "the weight + KV bytes one step reads and the GB/s that achieves. Where the engine does not\n"
      "sample on the device (the CPU; a CUDA path without --device-sampling), also the host's\n"
      "sampling per step (every row drawn at T = 1 after the step, as generate does:\n"
      "host_sample_ms_per_step, apart from ms_per_step) and the tok/s counting it.\n"
      "On CUDA each N runs --cuda-path's path (auto: the defaults' choice for N candidates on one\n"
      "prompt, so N = 1 and N = 64 may run different paths); each line names it (cuda_path, with\n"
      "any switch added, and cuda_path_why).\n"
      "Examples:\n"
      "  bestofn bench --synthetic bench-100m --device cpu --n 1,2,4,8,16,32 --prompt-len 256 --json\n"
      "  bestofn bench --model ~/models/Llama-3.1-8B-FP8 --device cuda --n 1,64 --json\n"
      "  bestofn bench --model ~/models/Llama-3.1-8B-FP8 --device cuda --n 64 --cuda-path reference --fused-qkv --json");
  auto* m = sub->add_option("--model", o->model, "Model directory")->check(non_empty());
  auto* s = sub->add_option("--synthetic", o->synthetic, "Synthetic preset to make for the run: tiny, llama-3.1-8b, bench-100m, or the path of a config.json")
                ->check(synthetic_shape());
  m->excludes(s);
  sub->add_option("--dtype", o->dtype, "Synthetic weights dtype")->check(CLI::IsMember({"f32", "f16", "bf16", "fp8"}))->default_str("fp8")->needs(s);
  sub->add_flag("--quantize-lm-head", o->engine.quantize_lm_head, "Quantize the lm_head to FP8 E4M3 at load (per output channel)");
  sub->add_option("--keep-model", o->keep_model, "Write the synthetic model here and keep it (reused when it exists)")->needs(s)->check(non_empty());
  sub->add_option("--device", o->device, "cpu, cuda, or auto (cuda when a device is visible)")->check(CLI::IsMember({"cpu", "cuda", "auto"}))->default_str("cpu");
  sub->add_option("--n", o->n_list, "Candidate counts, comma-separated")
      ->check(checked_by([](const std::string& text) { parse_n(text); }, "N,N,..."))
      ->default_str("1,2,4,8,16,32");
  sub->add_option("--prompt-len", o->prompt_len, "Prompt tokens")->check(CLI::Range(1, 1000000))->default_str("256");
  sub->add_option("--steps", o->steps, "Timed decode steps per configuration")->check(CLI::Range(1, 1000000))->default_str("16");
  sub->add_option("--threads", o->engine.threads, "CPU threads (0 or unset: the cores this process may use, or $BESTOFN_THREADS)")->check(CLI::Range(0, 1024));
  sub->add_flag("--json", o->json, "One JSON line per configuration (default: a table)");
  sub->add_option("--speculate", o->engine.speculate,
                  "Time steps of K + 1 positions per candidate (K drafts verified, then rolled back): the cost side of generate --speculate")
      ->check(CLI::Range(0, 64))
      ->default_str("0");
  add_cuda_flags(sub, o->engine.cuda, "cpu");
  add_kv_cache_flag(sub, o->engine.kv_cache);
  sub->callback([sub] {
    if (sub->count("--model") + sub->count("--synthetic") != 1) throw CLI::ValidationError("give one of --model DIR or --synthetic SHAPE");
  });
  return [o, command] { return run_bench(*o, command); };
}

}  // namespace bestofn::cli
