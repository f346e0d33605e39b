#include "bestofn/text_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>

#include "bestofn/error.h"

namespace bestofn {

int open_input(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    if (errno == EISDIR) throw Error(path.string(), "is a directory, not a file");
    throw Error(path.string(), std::string("cannot open: ") + std::strerror(errno));
  }
  struct stat st {};
  const char* what = nullptr;
  if (fstat(fd, &st) != 0) what = "cannot stat";
  else if (S_ISDIR(st.st_mode)) what = "is a directory, not a file";
  else if (!S_ISREG(st.st_mode) && !S_ISFIFO(st.st_mode)) what = "is not a regular file (a device or a socket)";
  if (what || fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0) {
    ::close(fd);
    throw Error(path.string(), what ? what : "cannot read");
  }
  return fd;
}

namespace {

// The bytes of fd (which this takes over), decompressed when they are gzip; errors name `name`.
std::string read_all(int fd, const std::string& name) {
  gzFile f = gzdopen(fd, "rb");
  if (!f) {
    ::close(fd);
    throw Error(name, std::string("cannot open: ") + std::strerror(errno));
  }
  std::string out;
  char buf[1 << 16];
  for (;;) {
    const int n = gzread(f, buf, sizeof buf);
    if (n < 0) {
      int code = 0;
      const std::string msg = gzerror(f, &code);
      gzclose(f);
      throw Error(name, "read failed: " + msg);
    }
    if (n == 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  // A truncated gzip stream reads as a short file: gzclose reports it.
  const int rc = gzclose(f);
  if (rc != Z_OK) throw Error(name, rc == Z_BUF_ERROR ? "truncated gzip stream" : "read failed (zlib error " + std::to_string(rc) + ")");
  return out;
}

}  // namespace

std::string read_text_file(const std::filesystem::path& path) { return read_all(open_input(path), path.string()); }

std::string input_name(const std::string& path) { return path == "-" ? "<stdin>" : path; }

std::string read_text_input(const std::string& path) {
  if (path != "-") return read_text_file(path);
  const int fd = fcntl(STDIN_FILENO, F_DUPFD_CLOEXEC, 0);  // gzclose closes its descriptor; stdin stays open
  if (fd < 0) throw Error("<stdin>", std::string("cannot read: ") + std::strerror(errno));
  return read_all(fd, "<stdin>");
}

}  // namespace bestofn
