// troupe._core's KVStore: kvstore/kvstore.h's stores (the dist types: a worker of the cluster `troupe launch`
// describes in the environment) as troupe.kvstore uses them.
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <memory>
#include <string>
#include <vector>

#include "kvstore/kvstore.h"
#include "python/src/bindings.h"

namespace nb = nanobind;

namespace troupe::python {

void BindKVStore(nb::module_& m) {
  nb::class_<KVStore>(m, "KVStoreHandle")
      // Joining a dist cluster waits for its scheduler.
      .def_static("create", &KVStore::Create, nb::call_guard<nb::gil_scoped_release>())
      .def_prop_ro("type", &KVStore::type)
      .def_prop_ro("rank", &KVStore::rank)
      .def_prop_ro("num_workers", &KVStore::num_workers)
      .def("init", [](KVStore& kv, const std::vector<int>& keys, const std::vector<NDArray>& values) {
        kv.Init(keys, values);
      })
      .def("push", [](KVStore& kv, const std::vector<int>& keys, const std::vector<NDArray>& values, int priority) {
        kv.Push(keys, values, priority);
      }, nb::call_guard<nb::gil_scoped_release>())
      .def("pull", [](KVStore& kv, const std::vector<int>& keys, const std::vector<NDArray>& outs, int priority) {
        kv.Pull(keys, outs, priority);
      }, nb::call_guard<nb::gil_scoped_release>())
      .def("set_optimizer", [](KVStore& kv, const std::string& type, const Kwargs& params) {
        kv.SetOptimizer(OptimizerConfig(type, params));
      }, nb::call_guard<nb::gil_scoped_release>())
      .def("barrier", &KVStore::Barrier, nb::call_guard<nb::gil_scoped_release>())
      .def("finalize", &KVStore::Finalize, nb::call_guard<nb::gil_scoped_release>());
}

}  // namespace troupe::python
