// libFuzzer target: the safetensors header parser must reject any bytes with bestofn::Error,
// never crash, hang or read out of bounds.
#include <cstddef>
#include <cstdint>

#include "bestofn/util/error.h"
#include "bestofn/model/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const auto h = bestofn::parse_safetensors(data, size, "fuzz-input");
    // A header that parsed must describe bytes inside the buffer.
    for (const auto& t : h.tensors)
      if (8 + h.header_len + t.offset + t.nbytes > size) __builtin_trap();
  } catch (const bestofn::Error&) {
  }
  return 0;
}
