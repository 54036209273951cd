// The token files of launched clusters: see tools/cluster_token.h.
#include "tools/cluster_token.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>

namespace troupe::tools {
namespace {

const char* Env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : nullptr;
}

// mkdir -p with mode 0700 for what it creates.
bool MakeDirs(const std::string& dir) {
  for (std::size_t i = 1; i <= dir.size(); ++i) {
    if (i < dir.size() && dir[i] != '/') continue;
    const std::string part = dir.substr(0, i);
    if (::mkdir(part.c_str(), 0700) != 0 && errno != EEXIST) return false;
  }
  return true;
}

}  // namespace

std::string ClusterTokenDir() {
  if (const char* d = Env("TROUPE_TOKEN_DIR")) return d;
  if (const char* d = Env("XDG_RUNTIME_DIR")) return std::string(d) + "/troupe";
  if (const char* h = Env("HOME")) return std::string(h) + "/.troupe/tokens";
  return "/tmp/troupe-tokens-" + std::to_string(::getuid());
}

std::string ClusterTokenPath(const std::string& host, int port) {
  return ClusterTokenDir() + "/" + host + "_" + std::to_string(port) + ".token";
}

std::string WriteClusterToken(const std::string& path, const std::string& token) {
  const std::string dir = path.substr(0, path.rfind('/'));
  if (!MakeDirs(dir)) return "cannot create " + dir + ": " + std::strerror(errno);
  ::unlink(path.c_str());  // a stale file of another run (its mode is not ours to trust)
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return "cannot create " + path + ": " + std::strerror(errno);
  const std::string text = token + "\n";
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  if (!ok) return "cannot write " + path;
  return {};
}

std::string ReadClusterToken(const std::string& path, std::string* error) {
  std::ifstream in(path);
  std::string token;
  if (!in || !std::getline(in, token) || token.empty()) {
    *error = "cannot read a token from " + path;
    return {};
  }
  return token;
}

ClusterTokenFile::~ClusterTokenFile() { Reset({}); }

void ClusterTokenFile::Reset(std::string path) {
  if (!path_.empty()) ::unlink(path_.c_str());
  path_ = std::move(path);
}

}  // namespace troupe::tools
