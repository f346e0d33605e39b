#pragma once
// --devices 0,1,...: several GPUs in one process, data parallel: one engine per device, each
// driven by its own thread, all feeding the same callbacks (in eval: one verifier pool).
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bestofn/engine/engine.h"
#include "bestofn/generate/scheduler.h"

namespace bestofn {

// "0,1,3" -> {0, 1, 3}: CUDA device ordinals as this process sees them (numbered within
// CUDA_VISIBLE_DEVICES), distinct, each < visible. Empty text: every visible device. Throws
// bestofn::Error naming --devices.
std::vector<int> parse_devices(const std::string& text, int visible);

// The CUDA devices a run uses: --devices (which makes --device auto mean cuda), else every
// visible device when the run is on CUDA (--device cuda, or auto with a device visible). Empty:
// the run is on the CPU. Throws bestofn::Error naming --devices when they cannot be used.
std::vector<int> choose_devices(std::string& device, const std::string& devices_flag);

// Engines on devices[1...] (the first is the one start_engine made), sharing the weights, each
// with `options` (the first engine's: started_options) on its own device.
std::vector<std::unique_ptr<Engine>> more_engines(const std::shared_ptr<const Weights>& weights, const std::vector<int>& devices,
                                                  const EngineOptions& options);

// generate() over several engines at once. Each request's candidates (its indices, else 0..n-1)
// are dealt to the engines in turn, the j-th to engine j mod E; a candidate's draws depend only on
// (seed, rng prompt, index), so the candidates are those of one engine. on_done and on_step are
// called from the engines' threads, one at a time (under one lock): on_step gets the totals over
// all engines. An engine's error cancels the others' work and is rethrown here.
GenerationStats generate_data_parallel(const std::vector<Engine*>& engines, const Tokenizer& tokenizer,
                                       const std::vector<GenerationRequest>& requests, const GenerationOptions& options,
                                       const std::function<void(Candidate&&)>& on_done,
                                       const std::function<void(const GenerationStats&, std::size_t done)>& on_step = {});

}  // namespace bestofn
