#pragma once
// Whole-file reads for text inputs (datasets, prompt files, tokenizer input), gzip or plain:
// zlib reads a plain file through the same call.
#include <filesystem>
#include <string>

namespace bestofn {

// The file's bytes, decompressed when it is gzip. Throws bestofn::Error naming the file.
std::string read_text_file(const std::filesystem::path& path);

}  // namespace bestofn
