// Checkpoints in MXNet's naming (mx.model.save_checkpoint / load_checkpoint): "<prefix>-symbol.json" and
// "<prefix>-%04d.params" holding "arg:<name>" and "aux:<name>" arrays in the .params format.
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "base/error.h"
#include "train/internal/checkpoint.h"
#include "train/train.h"

namespace troupe {
namespace checkpoint_detail {

std::string CheckpointParamsPath(const std::string& prefix, int epoch) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "-%04d.params", epoch);
  return prefix + buf;
}

std::string CheckpointStatesPath(const std::string& prefix, int epoch) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "-%04d.states", epoch);
  return prefix + buf;
}

std::string CheckpointSymbolPath(const std::string& prefix) { return prefix + "-symbol.json"; }

void SaveCheckpointParams(const std::string& path, const std::map<std::string, NDArray>& arg_params,
                          const std::map<std::string, NDArray>& aux_params) {
  std::vector<NDArray> arrays;
  std::vector<std::string> names;
  auto add = [&](const std::string& kind, const std::map<std::string, NDArray>& params) {
    for (const auto& [name, arr] : params) {
      if (arr.is_none()) {
        throw Error("SaveCheckpoint: parameter '" + name + "' is a none array (initialise it before saving)");
      }
      // MXNet saves copies on the CPU so that the file loads anywhere.
      arrays.push_back(arr.ctx().is_gpu() ? arr.CopyTo(Context::CPU()) : arr);
      names.push_back(kind + ":" + name);
    }
  };
  add("arg", arg_params);
  add("aux", aux_params);
  NDArray::Save(path, arrays, names);
}

void LoadCheckpointParams(const std::string& path, std::map<std::string, NDArray>* arg_params,
                          std::map<std::string, NDArray>* aux_params) {
  std::vector<NDArray> arrays;
  std::vector<std::string> names;
  const Context cpu = Context::CPU();
  NDArray::Load(path, &arrays, &names, &cpu);
  if (names.size() != arrays.size()) {
    throw Error("LoadCheckpoint: " + path + " holds a list of " + std::to_string(arrays.size()) +
                " unnamed arrays; a checkpoint needs names \"arg:<name>\" / \"aux:<name>\"");
  }
  if (arg_params) arg_params->clear();
  if (aux_params) aux_params->clear();
  for (std::size_t i = 0; i < arrays.size(); ++i) {
    const std::string& n = names[i];
    const auto colon = n.find(':');
    const std::string kind = colon == std::string::npos ? "" : n.substr(0, colon);
    if (kind != "arg" && kind != "aux") {
      throw Error("LoadCheckpoint: array '" + n + "' in " + path +
                  " has no \"arg:\" or \"aux:\" prefix (not a checkpoint written by save_checkpoint)");
    }
    auto* target = kind == "arg" ? arg_params : aux_params;
    if (target) (*target)[n.substr(colon + 1)] = arrays[i];
  }
}

}  // namespace checkpoint_detail

using namespace checkpoint_detail;

void SaveCheckpoint(const std::string& prefix, int epoch, const Symbol& symbol,
                    const std::map<std::string, NDArray>& arg_params,
                    const std::map<std::string, NDArray>& aux_params) {
  if (epoch < 0) throw Error("SaveCheckpoint: epoch " + std::to_string(epoch) + " is negative");
  symbol.Save(CheckpointSymbolPath(prefix));
  SaveCheckpointParams(CheckpointParamsPath(prefix, epoch), arg_params, aux_params);
}

void LoadCheckpoint(const std::string& prefix, int epoch, Symbol* symbol, std::map<std::string, NDArray>* arg_params,
                    std::map<std::string, NDArray>* aux_params) {
  if (symbol) *symbol = Symbol::Load(CheckpointSymbolPath(prefix));
  LoadCheckpointParams(CheckpointParamsPath(prefix, epoch), arg_params, aux_params);
}

}  // namespace troupe
