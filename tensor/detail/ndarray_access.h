// Internal access to an NDArray's autograd slot (op/autograd.h keeps its graph there) and the calling thread's
// recording flag, which NDArray's own operations check: they are not recorded, so while the thread records
// they refuse arrays that belong to a graph instead of silently leaving their part out of the gradients.
// Not part of the public API.
#pragma once

#include <memory>
#include <utility>

#include "tensor/ndarray.h"

namespace troupe {

class NDArrayAccess {
 public:
  static const std::shared_ptr<autograd::Entry>& Entry(const NDArray& a) { return a.autograd_; }
  static void SetEntry(NDArray* a, std::shared_ptr<autograd::Entry> e) { a->autograd_ = std::move(e); }
};

namespace internal {

// Whether the calling thread records (set by op/autograd.h's scopes).
bool& AutogradRecording();

// Throws troupe::Error naming `what` when the thread records and `a` belongs to a recorded graph.
void RefuseRecorded(const NDArray& a, const char* what);

}  // namespace internal
}  // namespace troupe
