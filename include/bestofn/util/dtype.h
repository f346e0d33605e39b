#pragma once
// Element types as safetensors names them.
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace bestofn {

enum class DType {
  F64, F32, F16, BF16, F8_E4M3, F8_E5M2,
  I64, I32, I16, I8, U64, U32, U16, U8, BOOL,
};

// Bytes per element.
std::size_t dtype_size(DType t);
// The safetensors spelling: "F32", "BF16", "F8_E4M3", ...
std::string_view dtype_name(DType t);
// nullopt for a name safetensors does not define.
std::optional<DType> parse_dtype(std::string_view name);
// True for the float types a model weight may have: F32, F16, BF16, F8_E4M3.
bool is_weight_dtype(DType t);

}  // namespace bestofn
