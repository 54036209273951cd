// A minimal reader and writer of Python's pickle format, for MXNet's optimizer states (.states: Module's
// save_optimizer_states writes pickle.dumps(updater.states), a dict index -> None | NDArray | tuple, nested).
// No Python is involved and nothing in a pickle is ever executed: the reader knows a fixed set of opcodes
// (protocols 2 to 5 as Python 3 writes them) and of globals, the ones MXNet's NDArray pickling uses
// (mxnet.ndarray.ndarray.NDArray, builtins.bytearray, and _codecs.encode for protocol 2's bytes); anything
// else is refused with an error naming the opcode or global and its byte offset.
//
// An NDArray pickles as NDArray.__reduce__ returns it: (NDArray, (None,), {'handle': bytearray(record)}), the
// record being MXNDArraySaveRawBytes's bytes (one array record of the .params format, shared/formats.md §1.3).
// The reader hands the record over as it is; op/src/optimizer.cc turns it into an NDArray.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace troupe::internal {

struct PickleValue;
using PickleRef = std::shared_ptr<PickleValue>;

// One value of the subset. Containers hold shared references: a pickle may refer to one object twice (its
// memo), and then both places see the same value. Lists and dicts are never elements of another container
// (MXNet's states have none there, and the rule keeps the values acyclic); tuples nest at most kMaxDepth deep.
struct PickleValue {
  enum class Kind { kNone, kBool, kInt, kFloat, kString, kBytes, kTuple, kList, kDict, kNDArray, kGlobal };
  Kind kind = Kind::kNone;
  bool boolean = false;
  std::int64_t integer = 0;
  double real = 0;
  // kString: UTF-8 text; kBytes: the bytes; kNDArray: the array's record (empty for a none handle);
  // kGlobal: the module.
  std::string text;
  std::string name;               // kGlobal: the attribute
  bool built = false;             // kNDArray: its BUILD (the handle) has been applied
  std::vector<PickleRef> items;   // kTuple, kList; kDict: key, value, key, value, ... in insertion order
  std::size_t offset = 0;         // the byte offset of the opcode that made it
  int depth = 0;                  // containers: 1 + the deepest element's depth

  static constexpr int kMaxDepth = 64;

  // "None", "int 3", "tuple of 2", "NDArray", ... for error messages.
  std::string Describe() const;

  static PickleRef None();
  static PickleRef Int(std::int64_t v);
  static PickleRef Tuple(std::vector<PickleRef> items);
  static PickleRef Dict();  // then AddItem
  static PickleRef NDArray(std::string record);
  void AddItem(PickleRef key, PickleRef value);  // kDict: appends (or replaces an equal int/str key's value)
};

// Parses a whole pickle (PROTO first, STOP last, nothing after). Throws troupe::Error starting with `source`
// and naming the byte offset and opcode of the first problem.
PickleRef ParsePickle(std::string_view data, const std::string& source);

// The bytes CPython 3.8+'s C pickler writes for the equivalent Python object with protocol 4 (its default,
// so MXNet's own files under Python 3.8+): framing, memo and batching as CPython's, so that a file MXNet
// wrote and troupe loaded and saved again is identical byte for byte. Supports None, bool, int, str, bytes,
// tuple, dict and NDArray (as MXNet's __reduce__ pickles it); a value reachable twice is written once and
// then referred to, as pickle does for one object.
std::string WritePickle(const PickleValue& value);

}  // namespace troupe::internal
