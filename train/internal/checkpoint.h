// Checkpoint file names and the .params layout ("arg:"/"aux:" prefixes), shared by checkpoint.cc and the
// Module (internal to train/).
#pragma once

#include <map>
#include <string>

#include "tensor/ndarray.h"

namespace troupe {
namespace checkpoint_detail {

std::string CheckpointSymbolPath(const std::string& prefix);             // prefix-symbol.json
std::string CheckpointParamsPath(const std::string& prefix, int epoch);  // prefix-%04d.params
std::string CheckpointStatesPath(const std::string& prefix, int epoch);  // prefix-%04d.states
void SaveCheckpointParams(const std::string& path, const std::map<std::string, NDArray>& arg_params,
                          const std::map<std::string, NDArray>& aux_params);
void LoadCheckpointParams(const std::string& path, std::map<std::string, NDArray>* arg_params,
                          std::map<std::string, NDArray>* aux_params);

}  // namespace checkpoint_detail
}  // namespace troupe
