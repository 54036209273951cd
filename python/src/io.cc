// troupe._core's data iterators: the registered C++ iterators (io/io.h: MNISTIter, CSVIter, ImageRecordIter, ...)
// as troupe.io's MXDataIter uses them.
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "base/error.h"
#include "io/io.h"
#include "python/src/bindings.h"

namespace nb = nanobind;

namespace troupe::python {

void BindIO(nb::module_& m) {
  nb::class_<DataIter>(m, "DataIterHandle")
      .def_static("create", &CreateDataIter)
      .def("before_first", &DataIter::BeforeFirst, nb::call_guard<nb::gil_scoped_release>())
      .def("next", &DataIter::Next, nb::call_guard<nb::gil_scoped_release>())
      .def("value", [](const DataIter& it) {
        const DataBatch& b = it.Value();
        return std::make_tuple(b.data, b.label, b.num_batch_padd, b.index);
      })
      .def("data_shapes", [](const DataIter& it) {
        std::vector<std::vector<std::int64_t>> v;
        for (const auto& s : it.DataShapes()) v.push_back(s.ToVector());
        return v;
      })
      .def("label_shapes", [](const DataIter& it) {
        std::vector<std::vector<std::int64_t>> v;
        for (const auto& s : it.LabelShapes()) v.push_back(s.ToVector());
        return v;
      });
  m.def("data_iters", [] {
    nb::list out;
    const auto& reg = DataIterRegistry::Get();
    for (const auto& name : reg.ListNames()) {
      const DataIterInfo* info = reg.Find(name);
      nb::list params;
      for (const auto& p : info->params) {
        params.append(nb::make_tuple(p.name, p.type, p.default_value, p.required, p.description));
      }
      out.append(nb::make_tuple(info->name, info->description, params));
    }
    return out;
  });
}

}  // namespace troupe::python
