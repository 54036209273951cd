// troupe::Error — the one exception type troupe throws inside a process.
//
// Messages name the thing that failed and, where there is one, the fix. Across actor and network
// boundaries errors travel as values (see DESIGN.md §5); they become a troupe::Error again where the
// user waits.
#pragma once

#include <stdexcept>
#include <string>

namespace troupe {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

}  // namespace troupe
