// Internal access to an NDArray's autograd slot (op/autograd.h keeps its graph there), the calling thread's
// recording flag, and the hook through which NDArray's own operations are recorded: while the thread records,
// an operation on an array of a graph that makes a new value (a + b, a * 2, AsType, Reshape, Slice) runs as the
// registered operator instead (elemwise_add, _mul_scalar, Cast, Reshape, slice_axis) through op/autograd's
// hook, so it joins the graph; one that writes an array of a graph in place (+=, fills, copies into it) is
// refused. Not part of the public API.
#pragma once

#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

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

// Whether an operation on `inputs` must be recorded: the thread records and one of them belongs to a graph.
bool MustRecord(std::initializer_list<const NDArray*> inputs);
// Runs the registered operator `op` on `inputs` with `kwargs` through autograd (op/autograd.h sets it when
// its library loads) and returns its first output; throws troupe::Error when nothing set it.
using AutogradInvoke = NDArray (*)(const char* op, const std::vector<NDArray>& inputs,
                                   const std::vector<std::pair<std::string, std::string>>& kwargs);
AutogradInvoke& AutogradInvokeHook();
NDArray InvokeRecorded(const char* op, const std::vector<NDArray>& inputs,
                       const std::vector<std::pair<std::string, std::string>>& kwargs = {});

}  // namespace internal
}  // namespace troupe
