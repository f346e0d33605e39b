#include "bestofn/text_file.h"

#include <zlib.h>

#include <cerrno>
#include <cstring>

#include "bestofn/error.h"

namespace bestofn {

std::string read_text_file(const std::filesystem::path& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw Error(path.string(), "is a directory, not a file");
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) throw Error(path.string(), std::string("cannot open: ") + std::strerror(errno));
  std::string out;
  char buf[1 << 16];
  for (;;) {
    const int n = gzread(f, buf, sizeof buf);
    if (n < 0) {
      int code = 0;
      const std::string msg = gzerror(f, &code);
      gzclose(f);
      throw Error(path.string(), "read failed: " + msg);
    }
    if (n == 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  // A truncated gzip stream reads as a short file: gzclose reports it.
  const int rc = gzclose(f);
  if (rc != Z_OK) throw Error(path.string(), rc == Z_BUF_ERROR ? "truncated gzip stream" : "read failed (zlib error " + std::to_string(rc) + ")");
  return out;
}

}  // namespace bestofn
