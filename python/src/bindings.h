// The parts of troupe._core (one function per part, called from the module's definition in core.cc).
#pragma once

#include <nanobind/nanobind.h>

namespace troupe::python {

void BindSymbol(nanobind::module_& m);  // symbol.cc: Symbol, Executor, CachedOp
void BindIO(nanobind::module_& m);      // io.cc: the registered data iterators
void BindKVStore(nanobind::module_& m); // kvstore.cc: the C++ stores (the dist types)

}  // namespace troupe::python
