// Placeholder: replaced by the .params reader/writer (in progress).
#include "ops/ndarray.h"

namespace troupe {

void NDArray::Save(const std::string&, const std::vector<NDArray>&, const std::vector<std::string>&) {
  throw Error("NDArray::Save: not implemented yet");
}
void NDArray::Load(const std::string&, std::vector<NDArray>*, std::vector<std::string>*, const Context*, Engine*) {
  throw Error("NDArray::Load: not implemented yet");
}
std::string NDArray::SaveToBytes(const std::vector<NDArray>&, const std::vector<std::string>&) {
  throw Error("NDArray::SaveToBytes: not implemented yet");
}
void NDArray::LoadFromBytes(const void*, std::size_t, const std::string&, std::vector<NDArray>*,
                            std::vector<std::string>*, const Context*, Engine*) {
  throw Error("NDArray::LoadFromBytes: not implemented yet");
}

}  // namespace troupe
