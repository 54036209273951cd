// `troupe scheduler` and `troupe server`: the distributed KVStore's roles as commands (kvstore/dist.h).
// Options override the DMLC_* / TROUPE_* environment (DistConfig::FromEnv); the cluster token is read from
// TROUPE_CLUSTER_TOKEN only (a command line is visible to every user of the machine). Both run until the
// cluster ends and exit 0 after an orderly end, 1 after a failure.
//
// Thread-safety: none needed; used from main() only.
#pragma once

#include <string>

namespace CLI {
class App;
}

namespace troupe::tools {

class DistCommand {
 public:
  // Adds the `scheduler` and `server` subcommands to `root`.
  explicit DistCommand(CLI::App* root);
  bool chosen() const;
  int Run();

 private:
  CLI::App* scheduler_ = nullptr;
  CLI::App* server_ = nullptr;
  int port_ = -1;
  std::string host_;
  std::string root_;
  int num_servers_ = 0;
  int num_workers_ = 0;
  int rank_ = -1;
  std::string checkpoint_dir_;
  long long checkpoint_every_ = -1;
  bool insecure_ = false;
};

}  // namespace troupe::tools
