// Where `troupe launch` leaves a cluster's token for `troupe shell --connect` (and the user) to find: one
// file per scheduler address, readable by the user only.
//
//   directory: $TROUPE_TOKEN_DIR, else $XDG_RUNTIME_DIR/troupe, else $HOME/.troupe/tokens (made with mode
//              0700 when missing)
//   file:      <host>_<port>.token, mode 0600, holding the token and a newline
#pragma once

#include <string>

namespace troupe::tools {

std::string ClusterTokenDir();
std::string ClusterTokenPath(const std::string& host, int port);
// Writes the token (the directory made first); returns an error message, or empty.
std::string WriteClusterToken(const std::string& path, const std::string& token);
// The token in `path` (its first line), or empty with *error set.
std::string ReadClusterToken(const std::string& path, std::string* error);

// Removes the file when it goes out of scope (a launch's token outlives no launch).
class ClusterTokenFile {
 public:
  ClusterTokenFile() = default;
  explicit ClusterTokenFile(std::string path) : path_(std::move(path)) {}
  ~ClusterTokenFile();
  ClusterTokenFile(const ClusterTokenFile&) = delete;
  ClusterTokenFile& operator=(const ClusterTokenFile&) = delete;
  void Reset(std::string path);

 private:
  std::string path_;
};

}  // namespace troupe::tools
