#pragma once
// Whole-file reads for text inputs (datasets, prompt files, tokenizer input), gzip or plain: a
// file that starts with gzip's magic bytes is decompressed, any other is read as it is.
#include <filesystem>
#include <initializer_list>
#include <string>
#include <string_view>

namespace bestofn {

// The file's bytes, decompressed when it is gzip (one member or several back to back, each
// checked by its CRC; zero padding after the last is allowed). Throws bestofn::Error naming the
// file when it cannot be read, or when gzip data is truncated, corrupt or followed by other bytes.
std::string read_text_file(const std::filesystem::path& path);

// read_text_file, where "-" is standard input (also gzip or plain; read to its end, so a
// terminal reads until ^D). Errors name it "<stdin>".
std::string read_text_input(const std::string& path);
// How errors name an input: "<stdin>" for "-", else the path.
std::string input_name(const std::string& path);

// Whether a file name ends in one of `extensions` (given in lower case), in any case:
// "Prompts.JSONL" is a .jsonl file.
bool has_extension(std::string_view name, std::initializer_list<std::string_view> extensions);

// A read-only descriptor (close-on-exec) of an input: a regular file, a pipe or a FIFO (opened
// without waiting for a writer: one that never comes reads as empty, never as a hang). A
// directory, a device (/dev/zero would be read forever) or a socket is a bestofn::Error naming the
// file, as is a file that cannot be opened.
int open_input(const std::filesystem::path& path);

}  // namespace bestofn
