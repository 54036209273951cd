// Pieces shared by the distributed KVStore's roles: see kvstore/internal/dist_common.h.
#include "kvstore/internal/dist_common.h"

#include <cstdint>
#include <cstdlib>

#include "base/error.h"

namespace troupe::internal {

const char* RoleName(net::Role role) {
  switch (role) {
    case net::Role::kScheduler:
      return "scheduler";
    case net::Role::kServer:
      return "server";
    case net::Role::kWorker:
      return "worker";
    case net::Role::kObserver:
      return "observer";
  }
  return "node";
}

std::string NodeName(net::Role role, int rank, const std::string& host) {
  std::string name = RoleName(role);
  if (rank >= 0 && role != net::Role::kScheduler) name.append(" ").append(std::to_string(rank));
  if (!host.empty()) name.append(" at ").append(host);
  return name;
}

std::string Arg(const net::Command& command, const std::string& key, const std::string& fallback) {
  for (const auto& [k, v] : command.args) {
    if (k == key) return v;
  }
  return fallback;
}

int IntArg(const net::Command& command, const std::string& key) {
  const std::string v = Arg(command, key);
  char* end = nullptr;
  const long x = std::strtol(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0') {
    throw Error("kvstore: command '" + command.name + "' has no integer argument '" + key + "'");
  }
  return static_cast<int>(x);
}

net::ConnOptions ConnOptionsOf(const DistConfig& config) {
  net::ConnOptions o;
  o.max_frame_bytes = config.max_frame_bytes;
  o.token = config.token;
  o.hello_timeout_ms = config.hello_timeout_ms;
  return o;
}

net::ConnOptions ListenOptionsOf(const DistConfig& config, const std::string& node) {
  net::ConnOptions o = ConnOptionsOf(config);
  o.admission = std::make_shared<net::Admission>(
      net::AdmissionLimits{config.max_pending_connections, config.max_connections, config.max_buffered_bytes}, node);
  return o;
}

void AppendRank(std::string* list, int rank) {
  if (!list->empty()) list->append(", ");
  list->append(std::to_string(rank));
}

std::string ShapeText(const std::vector<std::int64_t>& shape) {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) s.append(i ? "," : "").append(std::to_string(shape[i]));
  return s.append(")");
}

std::string CheckHello(const net::Hello& hello) {
  if (hello.protocol_version != net::kProtocolVersion) {
    return "protocol version " + std::to_string(hello.protocol_version) + " differs from this node's " +
           std::to_string(net::kProtocolVersion) + "; run the same troupe version on every node";
  }
  return {};
}

void Outcome::Set(int s, const std::string& message) {
  std::lock_guard<std::mutex> lock(mu);
  if (done) return;
  done = true;
  status = s;
  text = message;
  cv.notify_all();
}

int Outcome::Wait(int timeout_ms) {
  std::unique_lock<std::mutex> lock(mu);
  if (timeout_ms < 0) {
    cv.wait(lock, [this] { return done; });
  } else if (!cv.wait_for(lock, std::chrono::milliseconds(timeout_ms), [this] { return done; })) {
    return -1;
  }
  return status;
}

std::string Outcome::message() {
  std::lock_guard<std::mutex> lock(mu);
  return text;
}

std::vector<std::pair<std::string, std::string>> OptimizerArgs(const OptimizerConfig& config) {
  std::vector<std::pair<std::string, std::string>> args{{"type", config.type}};
  for (const auto& [k, v] : config.params) args.emplace_back("param." + k, v);
  if (!config.lr_scheduler.empty()) args.emplace_back("lr_scheduler", config.lr_scheduler);
  for (const auto& [k, v] : config.lr_scheduler_params) args.emplace_back("sched." + k, v);
  for (const auto& [index, mult] : config.multipliers) {
    args.emplace_back("mult." + std::to_string(index),
                      param_detail::PrintReal(mult.first) + "," + param_detail::PrintReal(mult.second));
  }
  return args;
}

OptimizerConfig OptimizerFromArgs(const std::vector<std::pair<std::string, std::string>>& args) {
  OptimizerConfig config;
  for (const auto& [k, v] : args) {
    if (k == "type") {
      config.type = v;
    } else if (k.rfind("param.", 0) == 0) {
      config.params.emplace_back(k.substr(6), v);
    } else if (k == "lr_scheduler") {
      config.lr_scheduler = v;
    } else if (k.rfind("sched.", 0) == 0) {
      config.lr_scheduler_params.emplace_back(k.substr(6), v);
    } else if (k.rfind("mult.", 0) == 0) {
      // "mult.<index>" = "<lr_mult>,<wd_mult>"
      const std::string index = k.substr(5);
      const auto comma = v.find(',');
      char* end = nullptr;
      const long i = std::strtol(index.c_str(), &end, 10);
      const std::string bad = "bad optimizer multiplier '" + k + "' = '" + v + "' (want mult.<index> = <lr_mult>,<wd_mult>)";
      if (index.empty() || *end != '\0' || i < 0 || i > INT32_MAX || comma == std::string::npos) throw Error(bad);
      try {
        config.multipliers[static_cast<int>(i)] = {static_cast<float>(param_detail::ParseReal(v.substr(0, comma))),
                                                   static_cast<float>(param_detail::ParseReal(v.substr(comma + 1)))};
      } catch (const std::exception&) {
        throw Error(bad);
      }
    }
  }
  return config;
}

}  // namespace troupe::internal
