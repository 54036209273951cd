#include "engine/internal/block_pool.h"

namespace troupe::internal {

OprBlock* BlockPool::Grow() {
  auto owned = std::make_unique<OprBlock>();
  owned->engine = engine_;
  all_blocks_.push_back(std::move(owned));
  return all_blocks_.back().get();
}

}  // namespace troupe::internal
