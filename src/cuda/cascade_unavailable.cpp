// Cascade attention in a build without FlashInfer's headers (cmake/Cuda.cmake compiles this in
// place of kernels/cascade_attention.cu and says so when it configures): the engine refuses the
// flag (cascade_attention_built), and these launchers say why if called anyway.
#include <string>

#include "bestofn/util/error.h"
#include "cuda/kernels.h"

namespace bestofn::cuda {
namespace {
[[noreturn]] void missing(const char* what) {
  throw Error(what, "this build has no FlashInfer headers (scripts/setup.sh or scripts/fetch_flashinfer.sh stages them; then reconfigure)");
}
}  // namespace

bool cascade_attention_built() { return false; }
bool cascade_attention_supported(int, int, int) { return false; }
CascadeSchedule cascade_schedule(const CascadeWorkspace&, int*, int*, int, int, int, int, int, bool, cudaStream_t) {
  missing("cascade_schedule");
}
void cascade_prefix_attention_cuda(const CascadePrefixArgs&, cudaStream_t) { missing("cascade_prefix_attention_cuda"); }
bool cascade_suffix_supported(int, int, int, KvFormat) { return false; }
CascadeSuffixSchedule cascade_suffix_schedule(const CascadeWorkspace&, int*, int, int, int, int, bool, cudaStream_t) {
  missing("cascade_suffix_schedule");
}
void cascade_suffix_attention_cuda(const CascadeSuffixArgs&, cudaStream_t) { missing("cascade_suffix_attention_cuda"); }
CascadeSuffixStates cascade_suffix_states(const CascadeSuffixArgs&) { missing("cascade_suffix_states"); }

}  // namespace bestofn::cuda
