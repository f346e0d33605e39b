#include "bestofn/util/text_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cstring>
#include <string_view>

#include "bestofn/util/error.h"

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

// Every byte of fd (which this takes over and closes); errors name `name`.
std::string read_bytes(int fd, const std::string& name) {
  std::string out;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int e = errno;
      ::close(fd);
      throw Error(name, std::string("read failed: ") + std::strerror(e));
    }
    if (n == 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return out;
}

bool gzip_magic(std::string_view s) { return s.size() >= 2 && static_cast<unsigned char>(s[0]) == 0x1f && static_cast<unsigned char>(s[1]) == 0x8b; }

// The data of a gzip file: one member or several, back to back (RFC 1952 2.2: their data
// joined), each checked against its CRC-32 and length. Zero bytes after the last member (padding
// some writers add) are allowed; anything else after it, a truncated member or a failed check is
// an error, never a silently shorter text.
std::string gunzip(std::string_view in, const std::string& name) {
  z_stream z{};
  if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK) throw Error(name, "cannot start gzip decompression");
  struct End {
    z_stream& z;
    ~End() { inflateEnd(&z); }
  } end{z};
  std::string out;
  char buf[1 << 16];
  std::size_t at = 0;  // the start of the member being read
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  z.avail_in = static_cast<uInt>(std::min<std::size_t>(in.size(), UINT_MAX));
  std::size_t fed = z.avail_in;
  for (;;) {
    z.next_out = reinterpret_cast<Bytef*>(buf);
    z.avail_out = sizeof buf;
    const int rc = inflate(&z, Z_NO_FLUSH);
    out.append(buf, sizeof buf - z.avail_out);
    if (z.avail_in == 0 && fed < in.size()) {  // (inputs over 4 GiB: the next piece)
      const std::size_t more = std::min<std::size_t>(in.size() - fed, UINT_MAX);
      z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data() + fed));
      z.avail_in = static_cast<uInt>(more);
      fed += more;
    }
    const std::size_t used = fed - z.avail_in;  // bytes consumed so far
    if (rc == Z_STREAM_END) {
      const std::string_view rest = in.substr(used);
      if (rest.empty()) return out;
      if (gzip_magic(rest)) {  // another member
        at = used;
        if (inflateReset(&z) != Z_OK) throw Error(name, "cannot restart gzip decompression");
        continue;
      }
      if (rest.find_first_not_of('\0') == std::string_view::npos) return out;
      throw Error(name, "unexpected data after the gzip stream: " + std::to_string(rest.size()) + " bytes from byte " +
                            std::to_string(used) + " that are not another gzip member");
    }
    if (rc == Z_OK) continue;
    if (rc == Z_BUF_ERROR && used == in.size())
      throw Error(name, "truncated gzip stream (it ends inside the member that starts at byte " + std::to_string(at) + ")");
    throw Error(name, std::string("corrupt gzip data: ") + (z.msg ? z.msg : "zlib error " + std::to_string(rc)));
  }
}

// The bytes of fd (which this takes over), decompressed when they are gzip; errors name `name`.
std::string read_all(int fd, const std::string& name) {
  std::string bytes = read_bytes(fd, name);
  return gzip_magic(bytes) ? gunzip(bytes, name) : bytes;
}

}  // namespace

std::string read_text_file(const std::filesystem::path& path) { return read_all(open_input(path), path.string()); }

std::string input_name(const std::string& path) { return path == "-" ? "<stdin>" : path; }

bool has_extension(std::string_view name, std::initializer_list<std::string_view> extensions) {
  for (std::string_view ext : extensions) {
    if (name.size() < ext.size()) continue;
    const std::string_view tail = name.substr(name.size() - ext.size());
    if (std::equal(tail.begin(), tail.end(), ext.begin(),
                   [](char a, char b) { return std::tolower(static_cast<unsigned char>(a)) == b; }))
      return true;
  }
  return false;
}

std::string read_text_input(const std::string& path) {
  if (path != "-") return read_text_file(path);
  const int fd = fcntl(STDIN_FILENO, F_DUPFD_CLOEXEC, 0);  // gzclose closes its descriptor; stdin stays open
  if (fd < 0) throw Error("<stdin>", std::string("cannot read: ") + std::strerror(errno));
  return read_all(fd, "<stdin>");
}

}  // namespace bestofn
