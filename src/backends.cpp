#include "bestofn/backends.h"

#if BESTOFN_HAVE_CUDA
#include "cuda/cuda_api.h"
#endif

namespace bestofn {

BackendInfo backend_info() {
  BackendInfo info;
#if BESTOFN_HAVE_CUDA
  info.cuda_built = true;
  info.cuda_devices = cuda::list_devices(&info.cuda_error);
#endif
  return info;
}

}  // namespace bestofn
