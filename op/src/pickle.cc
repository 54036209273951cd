#include "op/internal/pickle.h"

#include <bit>
#include <cstring>
#include <map>
#include <unordered_map>
#include <utility>

#include "base/error.h"

namespace troupe::internal {

static_assert(std::endian::native == std::endian::little, "the pickle code reads little-endian fields directly");

namespace {

using Kind = PickleValue::Kind;

// The opcodes' names (pickletools's), for error messages.
const char* OpcodeName(unsigned char op) {
  switch (op) {
    case '(': return "MARK";
    case '.': return "STOP";
    case '0': return "POP";
    case '1': return "POP_MARK";
    case '2': return "DUP";
    case 'F': return "FLOAT";
    case 'I': return "INT";
    case 'J': return "BININT";
    case 'K': return "BININT1";
    case 'L': return "LONG";
    case 'M': return "BININT2";
    case 'N': return "NONE";
    case 'P': return "PERSID";
    case 'Q': return "BINPERSID";
    case 'R': return "REDUCE";
    case 'S': return "STRING";
    case 'T': return "BINSTRING";
    case 'U': return "SHORT_BINSTRING";
    case 'V': return "UNICODE";
    case 'X': return "BINUNICODE";
    case 'a': return "APPEND";
    case 'b': return "BUILD";
    case 'c': return "GLOBAL";
    case 'd': return "DICT";
    case '}': return "EMPTY_DICT";
    case 'e': return "APPENDS";
    case 'g': return "GET";
    case 'h': return "BINGET";
    case 'i': return "INST";
    case 'j': return "LONG_BINGET";
    case 'l': return "LIST";
    case ']': return "EMPTY_LIST";
    case 'o': return "OBJ";
    case 'p': return "PUT";
    case 'q': return "BINPUT";
    case 'r': return "LONG_BINPUT";
    case 's': return "SETITEM";
    case 't': return "TUPLE";
    case ')': return "EMPTY_TUPLE";
    case 'u': return "SETITEMS";
    case 'G': return "BINFLOAT";
    case 0x80: return "PROTO";
    case 0x81: return "NEWOBJ";
    case 0x82: return "EXT1";
    case 0x83: return "EXT2";
    case 0x84: return "EXT4";
    case 0x85: return "TUPLE1";
    case 0x86: return "TUPLE2";
    case 0x87: return "TUPLE3";
    case 0x88: return "NEWTRUE";
    case 0x89: return "NEWFALSE";
    case 0x8a: return "LONG1";
    case 0x8b: return "LONG4";
    case 'B': return "BINBYTES";
    case 'C': return "SHORT_BINBYTES";
    case 0x8c: return "SHORT_BINUNICODE";
    case 0x8d: return "BINUNICODE8";
    case 0x8e: return "BINBYTES8";
    case 0x8f: return "EMPTY_SET";
    case 0x90: return "ADDITEMS";
    case 0x91: return "FROZENSET";
    case 0x92: return "NEWOBJ_EX";
    case 0x93: return "STACK_GLOBAL";
    case 0x94: return "MEMOIZE";
    case 0x95: return "FRAME";
    case 0x96: return "BYTEARRAY8";
    case 0x97: return "NEXT_BUFFER";
    case 0x98: return "READONLY_BUFFER";
    default: return nullptr;
  }
}

std::string OpcodeText(unsigned char op) {
  static const char* kHex = "0123456789abcdef";
  std::string hex = "0x";
  hex += kHex[op >> 4];
  hex += kHex[op & 15];
  const char* name = OpcodeName(op);
  return name != nullptr ? std::string(name) + " (" + hex + ")" : "unknown opcode " + hex;
}

bool KeysEqual(const PickleValue& a, const PickleValue& b) {
  if (a.kind != b.kind) return &a == &b;
  switch (a.kind) {
    case Kind::kNone: return true;
    case Kind::kInt: return a.integer == b.integer;
    case Kind::kBool: return a.boolean == b.boolean;
    case Kind::kString:
    case Kind::kBytes: return a.text == b.text;
    default: return &a == &b;
  }
}

// UTF-8 text whose code points are all below 256, as the Latin-1 bytes they stand for (protocol 2 pickles
// bytes as _codecs.encode(text, 'latin1')). False when a code point is 256 or more or the text is bad.
bool Latin1Bytes(const std::string& utf8, std::string* out) {
  out->clear();
  for (std::size_t i = 0; i < utf8.size(); ++i) {
    const auto c = static_cast<unsigned char>(utf8[i]);
    if (c < 0x80) {
      out->push_back(static_cast<char>(c));
    } else if ((c & 0xe0) == 0xc0 && c <= 0xc3 && i + 1 < utf8.size() &&
               (static_cast<unsigned char>(utf8[i + 1]) & 0xc0) == 0x80) {
      out->push_back(static_cast<char>(((c & 0x1f) << 6) | (static_cast<unsigned char>(utf8[i + 1]) & 0x3f)));
      ++i;
    } else {
      return false;
    }
  }
  return true;
}

class Parser {
 public:
  Parser(std::string_view data, std::string source) : d_(data), source_(std::move(source)) {}

  PickleRef Run() {
    if (d_.empty()) Fail(0, "is empty; expected a pickle (PROTO 0x80 first)");
    if (static_cast<unsigned char>(d_[0]) != 0x80) {
      Fail(0, "starts with " + OpcodeText(static_cast<unsigned char>(d_[0])) +
                  ", not PROTO (0x80): a pickle of protocol 0 or 1 (Python 2's default) or not a pickle; troupe "
                  "reads protocols 2 to 5");
    }
    for (;;) {
      if (pos_ >= d_.size()) Fail(pos_, "ends without STOP; the pickle is truncated");
      op_at_ = pos_;
      const auto op = static_cast<unsigned char>(d_[pos_++]);
      if (Step(op)) break;
    }
    if (pos_ != d_.size()) {
      Fail(pos_, std::to_string(d_.size() - pos_) + " bytes follow STOP; expected the end of the pickle");
    }
    if (!marks_.empty()) Fail(op_at_, "STOP with a MARK still open");
    if (stack_.size() != 1) {
      Fail(op_at_, "STOP with " + std::to_string(stack_.size()) + " values on the stack, expected 1");
    }
    PickleRef top = stack_.back();
    CheckFinished(*top);
    return top;
  }

 private:
  [[noreturn]] void Fail(std::size_t at, const std::string& msg) const {
    throw Error(source_ + ": byte " + std::to_string(at) + ": " + msg);
  }
  [[noreturn]] void FailOp(unsigned char op, const std::string& msg) const {
    Fail(op_at_, OpcodeText(op) + ": " + msg);
  }

  const char* Take(std::size_t n, unsigned char op) {
    if (n > d_.size() - pos_) {
      FailOp(op, "needs " + std::to_string(n) + " more bytes but " + std::to_string(d_.size() - pos_) +
                     " are left; the pickle is truncated");
    }
    const char* p = d_.data() + pos_;
    pos_ += n;
    return p;
  }
  template <typename T>
  T Read(unsigned char op) {
    T v;
    std::memcpy(&v, Take(sizeof(T), op), sizeof(T));
    return v;
  }
  std::string ReadLine(unsigned char op) {
    const std::size_t nl = d_.find('\n', pos_);
    if (nl == std::string_view::npos) FailOp(op, "has no end of line; the pickle is truncated");
    std::string s(d_.substr(pos_, nl - pos_));
    pos_ = nl + 1;
    return s;
  }

  PickleRef Pop(unsigned char op) {
    if (stack_.empty() || (!marks_.empty() && stack_.size() == marks_.back())) {
      FailOp(op, "needs a value but the stack is empty (or ends at a MARK)");
    }
    PickleRef v = std::move(stack_.back());
    stack_.pop_back();
    return v;
  }
  std::vector<PickleRef> PopMark(unsigned char op) {
    if (marks_.empty()) FailOp(op, "needs a MARK but none is open");
    const std::size_t m = marks_.back();
    marks_.pop_back();
    std::vector<PickleRef> items(std::make_move_iterator(stack_.begin() + static_cast<std::ptrdiff_t>(m)),
                                 std::make_move_iterator(stack_.end()));
    stack_.resize(m);
    return items;
  }
  PickleRef Make(Kind kind) {
    auto v = std::make_shared<PickleValue>();
    v->kind = kind;
    v->offset = op_at_;
    return v;
  }
  void Push(PickleRef v) { stack_.push_back(std::move(v)); }

  // A value going into a container: finished (an NDArray has had its BUILD), not a list or dict, not a global.
  void CheckElement(const PickleValue& v, unsigned char op) const {
    if (v.kind == Kind::kList || v.kind == Kind::kDict) {
      FailOp(op, "a " + v.Describe() + " (made at byte " + std::to_string(v.offset) +
                     ") inside another container; MXNet's optimizer states hold none there (a file saved "
                     "with dump_optimizer=True pairs the states with the optimizer, which troupe does not read)");
    }
    if (v.kind == Kind::kGlobal) {
      FailOp(op, "the global " + v.text + "." + v.name + " used as a value; only calls of it are accepted");
    }
    CheckFinished(v);
  }
  void CheckFinished(const PickleValue& v) const {
    if (v.kind == Kind::kNDArray && !v.built) {
      Fail(v.offset, "an NDArray without its state (no BUILD with {'handle': ...} follows its REDUCE)");
    }
  }
  PickleRef MakeTuple(std::vector<PickleRef> items, unsigned char op) {
    PickleRef t = Make(Kind::kTuple);
    int depth = 0;
    for (const auto& e : items) {
      CheckElement(*e, op);
      depth = std::max(depth, e->depth);
    }
    if (depth + 1 > PickleValue::kMaxDepth) {
      FailOp(op, "tuples nested deeper than " + std::to_string(PickleValue::kMaxDepth));
    }
    t->depth = depth + 1;
    t->items = std::move(items);
    return t;
  }
  PickleValue& Target(unsigned char op, Kind kind) {
    if (stack_.empty() || (!marks_.empty() && stack_.size() == marks_.back())) {
      FailOp(op, "needs a container below its items but the stack is empty");
    }
    PickleValue& c = *stack_.back();
    if (c.kind != kind) {
      FailOp(op, "applies to a " + std::string(kind == Kind::kDict ? "dict" : "list") + ", not to a " + c.Describe());
    }
    return c;
  }
  void SetItems(PickleValue& dict, std::vector<PickleRef> items, unsigned char op) {
    if (items.size() % 2 != 0) FailOp(op, "an odd number of items (keys and values alternate)");
    for (std::size_t i = 0; i < items.size(); i += 2) {
      CheckElement(*items[i], op);
      CheckElement(*items[i + 1], op);
      if (items[i]->depth + 1 > PickleValue::kMaxDepth || items[i + 1]->depth + 1 > PickleValue::kMaxDepth) {
        FailOp(op, "values nested deeper than " + std::to_string(PickleValue::kMaxDepth));
      }
      dict.AddItem(std::move(items[i]), std::move(items[i + 1]));
    }
  }
  void Memo(std::uint64_t index, unsigned char op) {
    if (stack_.empty()) FailOp(op, "stores into the memo but the stack is empty");
    memo_[index] = stack_.back();
  }
  void Get(std::uint64_t index, unsigned char op) {
    const auto it = memo_.find(index);
    if (it == memo_.end()) FailOp(op, "memo entry " + std::to_string(index) + " was never stored");
    Push(it->second);
  }
  void Global(std::string module, std::string name, unsigned char op) {
    const bool ok = (module == "mxnet.ndarray.ndarray" && name == "NDArray") ||
                    ((module == "builtins" || module == "__builtin__") && name == "bytearray") ||
                    (module == "_codecs" && name == "encode");
    if (!ok) {
      std::string hint;
      if (module.rfind("mxnet.optimizer", 0) == 0) {
        hint = " (an optimizer object: the file was saved with dump_optimizer=True, which pickles the optimizer "
               "with the states; save it with dump_optimizer=False, Module's default)";
      } else if (module.rfind("numpy", 0) == 0) {
        hint = " (a NumPy array: the states hold numpy arrays rather than mx.nd.NDArray)";
      }
      FailOp(op, "refers to the global " + module + "." + name +
                     ", which troupe does not accept; only mxnet.ndarray.ndarray.NDArray and the bytes it pickles "
                     "(builtins.bytearray, _codecs.encode) are" + hint);
    }
    PickleRef g = Make(Kind::kGlobal);
    g->text = std::move(module);
    g->name = std::move(name);
    Push(std::move(g));
  }
  // REDUCE and NEWOBJ: a call of an accepted global.
  void Call(const PickleRef& callable, const PickleValue& args, unsigned char op) {
    if (callable->kind != Kind::kGlobal) FailOp(op, "calls a " + callable->Describe() + ", not a global");
    if (args.kind != Kind::kTuple) FailOp(op, "the arguments are a " + args.Describe() + ", not a tuple");
    const std::string& name = callable->name;
    const auto& a = args.items;
    if (name == "NDArray") {
      if (!(a.empty() || (a.size() == 1 && a[0]->kind == Kind::kNone))) {
        FailOp(op, "NDArray called with " + args.Describe() + "; MXNet pickles NDArray(None) and then its state");
      }
      Push(Make(Kind::kNDArray));
      return;
    }
    PickleRef bytes = Make(Kind::kBytes);
    if (name == "bytearray") {
      if (a.empty()) {
        Push(std::move(bytes));
        return;
      }
      if (a.size() == 1 && a[0]->kind == Kind::kBytes) {
        bytes->text = a[0]->text;
        Push(std::move(bytes));
        return;
      }
      if (a.size() == 2 && a[0]->kind == Kind::kString && a[1]->kind == Kind::kString &&
          (a[1]->text == "latin-1" || a[1]->text == "latin1") && Latin1Bytes(a[0]->text, &bytes->text)) {
        Push(std::move(bytes));
        return;
      }
      FailOp(op, "bytearray called with " + args.Describe() + "; expected (bytes,) or (str, 'latin-1')");
    }
    // _codecs.encode(text, 'latin1'): protocol 2's bytes.
    if (a.size() == 2 && a[0]->kind == Kind::kString && a[1]->kind == Kind::kString &&
        (a[1]->text == "latin1" || a[1]->text == "latin-1") && Latin1Bytes(a[0]->text, &bytes->text)) {
      Push(std::move(bytes));
      return;
    }
    FailOp(op, "_codecs.encode called with " + args.Describe() + "; expected (str of code points < 256, 'latin1')");
  }

  // One opcode; true at STOP.
  bool Step(unsigned char op) {
    switch (op) {
      case 0x80: {  // PROTO
        const auto v = Read<std::uint8_t>(op);
        if (v < 2 || v > 5) FailOp(op, "protocol " + std::to_string(v) + "; troupe reads protocols 2 to 5");
        return false;
      }
      case 0x95: {  // FRAME: the frame's length; the opcodes inside read as any others
        const auto n = Read<std::uint64_t>(op);
        if (n > d_.size() - pos_) {
          FailOp(op, "a frame of " + std::to_string(n) + " bytes but " + std::to_string(d_.size() - pos_) +
                         " are left; the pickle is truncated");
        }
        return false;
      }
      case '.': return true;
      case '(': marks_.push_back(stack_.size()); return false;
      case 'N': Push(Make(Kind::kNone)); return false;
      case 0x88:
      case 0x89: {
        PickleRef b = Make(Kind::kBool);
        b->boolean = op == 0x88;
        Push(std::move(b));
        return false;
      }
      case 'J': PushInt(Read<std::int32_t>(op)); return false;
      case 'K': PushInt(Read<std::uint8_t>(op)); return false;
      case 'M': PushInt(Read<std::uint16_t>(op)); return false;
      case 0x8a: {  // LONG1: little-endian two's complement of n bytes
        const auto n = Read<std::uint8_t>(op);
        if (n > 8) FailOp(op, "an integer of " + std::to_string(n) + " bytes; troupe reads up to 8");
        const char* p = Take(n, op);
        std::uint64_t u = 0;
        for (int i = n - 1; i >= 0; --i) u = (u << 8) | static_cast<unsigned char>(p[i]);
        if (n > 0 && n < 8 && (static_cast<unsigned char>(p[n - 1]) & 0x80)) u |= ~std::uint64_t{0} << (8 * n);
        PushInt(static_cast<std::int64_t>(u));
        return false;
      }
      case 'G': {  // BINFLOAT: big-endian
        const auto be = Read<std::uint64_t>(op);
        std::uint64_t u = 0;
        for (int i = 0; i < 8; ++i) u |= ((be >> (8 * i)) & 0xff) << (8 * (7 - i));
        PickleRef f = Make(Kind::kFloat);
        std::memcpy(&f->real, &u, sizeof(u));
        Push(std::move(f));
        return false;
      }
      case 0x8c: PushText(Kind::kString, Read<std::uint8_t>(op), op); return false;
      case 'X': PushText(Kind::kString, Read<std::uint32_t>(op), op); return false;
      case 0x8d: PushText(Kind::kString, Read<std::uint64_t>(op), op); return false;
      case 'C': PushText(Kind::kBytes, Read<std::uint8_t>(op), op); return false;
      case 'B': PushText(Kind::kBytes, Read<std::uint32_t>(op), op); return false;
      case 0x8e:
      case 0x96: PushText(Kind::kBytes, Read<std::uint64_t>(op), op); return false;
      case ')': Push(MakeTuple({}, op)); return false;
      case 't': Push(MakeTuple(PopMark(op), op)); return false;
      case 0x85:
      case 0x86:
      case 0x87: {
        const std::size_t n = op - 0x84u;
        std::vector<PickleRef> items(n);
        for (std::size_t i = n; i-- > 0;) items[i] = Pop(op);
        Push(MakeTuple(std::move(items), op));
        return false;
      }
      case ']': Push(Make(Kind::kList)); return false;
      case 'l': {
        PickleRef l = Make(Kind::kList);
        for (auto& e : PopMark(op)) AppendTo(*l, std::move(e), op);
        Push(std::move(l));
        return false;
      }
      case 'a': {
        PickleRef v = Pop(op);
        AppendTo(Target(op, Kind::kList), std::move(v), op);
        return false;
      }
      case 'e': {
        std::vector<PickleRef> items = PopMark(op);
        PickleValue& l = Target(op, Kind::kList);
        for (auto& e : items) AppendTo(l, std::move(e), op);
        return false;
      }
      case '}': Push(Make(Kind::kDict)); return false;
      case 'd': {
        PickleRef dict = Make(Kind::kDict);
        SetItems(*dict, PopMark(op), op);
        Push(std::move(dict));
        return false;
      }
      case 's': {
        PickleRef v = Pop(op);
        PickleRef k = Pop(op);
        SetItems(Target(op, Kind::kDict), {std::move(k), std::move(v)}, op);
        return false;
      }
      case 'u': {
        std::vector<PickleRef> items = PopMark(op);
        SetItems(Target(op, Kind::kDict), std::move(items), op);
        return false;
      }
      case 'c': {
        std::string module = ReadLine(op);
        std::string name = ReadLine(op);
        Global(std::move(module), std::move(name), op);
        return false;
      }
      case 0x93: {
        PickleRef name = Pop(op);
        PickleRef module = Pop(op);
        if (module->kind != Kind::kString || name->kind != Kind::kString) {
          FailOp(op, "needs a module and a name (two str), got " + module->Describe() + " and " + name->Describe());
        }
        Global(module->text, name->text, op);
        return false;
      }
      case 'R':
      case 0x81: {
        PickleRef args = Pop(op);
        PickleRef callable = Pop(op);
        Call(callable, *args, op);
        return false;
      }
      case 'b': {
        PickleRef state = Pop(op);
        if (stack_.empty() || (!marks_.empty() && stack_.size() == marks_.back())) {
          FailOp(op, "needs an object below its state but the stack is empty");
        }
        PickleValue& obj = *stack_.back();
        if (obj.kind != Kind::kNDArray || obj.built) {
          FailOp(op, "sets the state of a " + obj.Describe() + "; troupe sets only an NDArray's, once");
        }
        const PickleValue* handle = nullptr;
        if (state->kind == Kind::kDict && state->items.size() == 2 && state->items[0]->kind == Kind::kString &&
            state->items[0]->text == "handle") {
          handle = state->items[1].get();
        }
        if (handle == nullptr || (handle->kind != Kind::kBytes && handle->kind != Kind::kNone)) {
          FailOp(op, "the NDArray's state is a " + state->Describe() +
                         "; MXNet's is {'handle': bytearray} (MXNDArraySaveRawBytes's bytes) or {'handle': None}");
        }
        if (handle->kind == Kind::kBytes) {
          if (handle->text.empty()) FailOp(op, "the NDArray's handle is empty bytes; expected an array record");
          obj.text = handle->text;
        }
        obj.built = true;
        return false;
      }
      case 0x94: Memo(memo_.size(), op); return false;
      case 'q': Memo(Read<std::uint8_t>(op), op); return false;
      case 'r': Memo(Read<std::uint32_t>(op), op); return false;
      case 'h': Get(Read<std::uint8_t>(op), op); return false;
      case 'j': Get(Read<std::uint32_t>(op), op); return false;
      default:
        FailOp(op, "is not read by troupe's pickle reader, which takes the opcodes MXNet's optimizer states use "
                   "(protocols 2 to 5: dicts, tuples, lists, ints, strings, bytes and NDArrays)");
    }
  }

  void PushInt(std::int64_t v) {
    PickleRef i = Make(Kind::kInt);
    i->integer = v;
    Push(std::move(i));
  }
  void PushText(Kind kind, std::uint64_t n, unsigned char op) {
    if (n > d_.size() - pos_) {
      FailOp(op, std::to_string(n) + " bytes of data but " + std::to_string(d_.size() - pos_) +
                     " are left; the pickle is truncated");
    }
    PickleRef v = Make(kind);
    v->text.assign(Take(static_cast<std::size_t>(n), op), static_cast<std::size_t>(n));
    Push(std::move(v));
  }
  void AppendTo(PickleValue& list, PickleRef v, unsigned char op) {
    CheckElement(*v, op);
    if (v->depth + 1 > PickleValue::kMaxDepth) {
      FailOp(op, "values nested deeper than " + std::to_string(PickleValue::kMaxDepth));
    }
    list.depth = std::max(list.depth, v->depth + 1);
    list.items.push_back(std::move(v));
  }

  std::string_view d_;
  std::string source_;
  std::size_t pos_ = 0;
  std::size_t op_at_ = 0;
  std::vector<PickleRef> stack_;
  std::vector<std::size_t> marks_;
  std::unordered_map<std::uint64_t, PickleRef> memo_;
};

// CPython's C pickler, protocol 4, for the subset: frames of at least 64 KiB committed at the start of
// the next object's save, payloads of 64 KiB or more written outside frames, MEMOIZE after every object
// pickle memoizes, BINGET for one seen again.
class Writer {
 public:
  std::string Run(const PickleValue& v) {
    out_ = "\x80\x04";
    framing_ = true;
    Save(v);
    Write(".");
    CommitFrame();
    return std::move(out_);
  }

 private:
  static constexpr std::size_t kFrameTarget = 64 * 1024;
  static constexpr std::size_t kFrameHeader = 9;
  // Memo keys of the objects that are one Python object however often they occur: the NDArray class, the
  // bytearray class, the 'handle' string and the (None,) constant of NDArray.__reduce__.
  enum Fixed : std::uintptr_t { kNDArrayClass = 1, kBytearrayClass, kHandleKey, kNoneArgs };

  void Write(std::string_view s) {
    if (framing_ && frame_start_ < 0) {
      frame_start_ = static_cast<std::ptrdiff_t>(out_.size());
      out_.append(kFrameHeader, '\0');
    }
    out_.append(s);
  }
  void CommitFrame() {
    if (frame_start_ < 0) return;
    const auto start = static_cast<std::size_t>(frame_start_);
    const std::uint64_t len = out_.size() - start - kFrameHeader;
    if (len >= 4) {
      out_[start] = static_cast<char>(0x95);
      std::memcpy(&out_[start + 1], &len, 8);
    } else {
      out_.erase(start, kFrameHeader);
    }
    frame_start_ = -1;
  }
  // Every save begins here (CPython's framer.commit_frame() at the top of save()).
  void Boundary() {
    if (frame_start_ >= 0 && out_.size() - static_cast<std::size_t>(frame_start_) - kFrameHeader >= kFrameTarget) {
      CommitFrame();
    }
  }
  void WriteData(std::string header, std::string_view data) {
    if (data.size() >= kFrameTarget) {
      CommitFrame();
      framing_ = false;
      Write(header);
      Write(data);
      framing_ = true;
    } else {
      header.append(data);
      Write(header);
    }
  }
  template <typename T>
  static std::string Le(T v) {
    std::string s(sizeof(T), '\0');
    std::memcpy(s.data(), &v, sizeof(T));
    return s;
  }
  void Memoize(std::uintptr_t key) {
    const std::size_t index = memo_.size();
    memo_.emplace(key, index);
    Write("\x94");
  }
  // True (and BINGET written) when `key` was saved before.
  bool Seen(std::uintptr_t key) {
    const auto it = memo_.find(key);
    if (it == memo_.end()) return false;
    if (it->second < 256) {
      Write(std::string("h") + static_cast<char>(it->second));
    } else {
      Write("j" + Le(static_cast<std::uint32_t>(it->second)));
    }
    return true;
  }
  void SaveInt(std::int64_t v) {
    Boundary();
    if (v >= 0 && v <= 0xff) {
      Write(std::string("K") + static_cast<char>(v));
    } else if (v >= 0 && v <= 0xffff) {
      Write("M" + Le(static_cast<std::uint16_t>(v)));
    } else if (v >= INT32_MIN && v <= INT32_MAX) {
      Write("J" + Le(static_cast<std::int32_t>(v)));
    } else {
      // LONG1: the shortest little-endian two's complement.
      std::string bytes = Le(v);
      while (bytes.size() > 1) {
        const auto last = static_cast<unsigned char>(bytes.back());
        const auto prev = static_cast<unsigned char>(bytes[bytes.size() - 2]);
        if ((last == 0 && !(prev & 0x80)) || (last == 0xff && (prev & 0x80))) {
          bytes.pop_back();
        } else {
          break;
        }
      }
      Write(std::string("\x8a") + static_cast<char>(bytes.size()) + bytes);
    }
  }
  // str: SHORT_BINUNICODE / BINUNICODE / BINUNICODE8; bytes: SHORT_BINBYTES / BINBYTES / BINBYTES8.
  void SaveStr(std::string_view s, std::uintptr_t key) { SaveSized(s, key, '\x8c', 'X', '\x8d'); }
  void SaveBytes(std::string_view s, std::uintptr_t key) { SaveSized(s, key, 'C', 'B', '\x8e'); }
  // `s` behind the opcode for its length: one byte, four or eight (little-endian); memoized.
  void SaveSized(std::string_view s, std::uintptr_t key, char op8, char op32, char op64) {
    Boundary();
    if (Seen(key)) return;
    if (s.size() <= 0xff) {
      WriteData(std::string(1, op8) + static_cast<char>(s.size()), s);
    } else if (s.size() > 0xffffffffu) {
      WriteData(std::string(1, op64) + Le(static_cast<std::uint64_t>(s.size())), s);
    } else {
      WriteData(std::string(1, op32) + Le(static_cast<std::uint32_t>(s.size())), s);
    }
    Memoize(key);
  }
  // save_global, protocol 4: module and name as strings, STACK_GLOBAL, memoized.
  void SaveGlobal(const char* module, const char* name, std::uintptr_t key) {
    Boundary();
    if (Seen(key)) return;
    // The strings are fresh objects to the memo (keys no value can have: odd addresses inside this object).
    SaveStr(module, reinterpret_cast<std::uintptr_t>(module));
    SaveStr(name, reinterpret_cast<std::uintptr_t>(name));
    Write("\x93");
    Memoize(key);
  }
  void SaveNDArray(const PickleValue& v) {
    const auto self = reinterpret_cast<std::uintptr_t>(&v);
    // save_reduce(NDArray, (None,), state): func, args, REDUCE, memoize, state, BUILD.
    SaveGlobal("mxnet.ndarray.ndarray", "NDArray", kNDArrayClass);
    Boundary();
    if (!Seen(kNoneArgs)) {
      Boundary();
      Write("N");
      Write("\x85");
      Memoize(kNoneArgs);
    }
    Write("R");
    Memoize(self);
    // The state {'handle': bytearray(record)}: a fresh dict, one item.
    Boundary();
    Write("}");
    Memoize(self + 1);
    SaveStr("handle", kHandleKey);
    Boundary();
    if (v.text.empty()) {
      Write("N");
    } else {
      // bytearray.__reduce_ex__(4): (bytearray, (bytes(self),)).
      SaveGlobal("builtins", "bytearray", kBytearrayClass);
      Boundary();  // the args tuple
      SaveBytes(v.text, self + 2);
      Write("\x85");
      Memoize(self + 3);
      Write("R");
      Memoize(self + 4);
    }
    Write("s");
    Write("b");
  }
  void Save(const PickleValue& v) {
    const auto key = reinterpret_cast<std::uintptr_t>(&v);
    switch (v.kind) {
      case Kind::kNone: Boundary(); Write("N"); return;
      case Kind::kBool: Boundary(); Write(v.boolean ? "\x88" : "\x89"); return;
      case Kind::kInt: SaveInt(v.integer); return;
      case Kind::kString: SaveStr(v.text, key); return;
      case Kind::kBytes: SaveBytes(v.text, key); return;
      case Kind::kNDArray:
        Boundary();
        if (Seen(key)) return;
        SaveNDArray(v);
        return;
      case Kind::kTuple: {
        Boundary();
        if (Seen(key)) return;
        if (v.items.empty()) {
          Write(")");
          return;
        }
        if (v.items.size() <= 3) {
          for (const auto& e : v.items) Save(*e);
          Write(std::string(1, static_cast<char>(0x84 + v.items.size())));
        } else {
          Write("(");
          for (const auto& e : v.items) Save(*e);
          Write("t");
        }
        Memoize(key);
        return;
      }
      case Kind::kDict: {
        Boundary();
        if (Seen(key)) return;
        Write("}");
        Memoize(key);
        const std::size_t n = v.items.size() / 2;
        if (n == 1) {
          Save(*v.items[0]);
          Save(*v.items[1]);
          Write("s");
          return;
        }
        if (n == 0) return;
        // CPython's batch_dict_exact: batches of 1000, each MARK ... SETITEMS, and one more (empty) batch
        // after a full one.
        std::size_t i = 0;
        std::size_t in_batch = 0;
        do {
          in_batch = 0;
          Write("(");
          while (i < n) {
            Save(*v.items[2 * i]);
            Save(*v.items[2 * i + 1]);
            ++i;
            if (++in_batch == 1000) break;
          }
          Write("u");
        } while (in_batch == 1000);
        return;
      }
      default:
        throw Error("WritePickle: a " + v.Describe() + " is not written (None, bool, int, str, bytes, tuple, dict and "
                    "NDArray are)");
    }
  }

  std::string out_;
  bool framing_ = false;
  std::ptrdiff_t frame_start_ = -1;
  std::map<std::uintptr_t, std::size_t> memo_;
};

}  // namespace

std::string PickleValue::Describe() const {
  switch (kind) {
    case Kind::kNone: return "None";
    case Kind::kBool: return boolean ? "True" : "False";
    case Kind::kInt: return "int " + std::to_string(integer);
    case Kind::kFloat: return "float";
    case Kind::kString: return "str '" + (text.size() > 40 ? text.substr(0, 40) + "..." : text) + "'";
    case Kind::kBytes: return "bytes of length " + std::to_string(text.size());
    case Kind::kTuple: return "tuple of " + std::to_string(items.size());
    case Kind::kList: return "list of " + std::to_string(items.size());
    case Kind::kDict: return "dict of " + std::to_string(items.size() / 2);
    case Kind::kNDArray: return "NDArray";
    case Kind::kGlobal: return "global " + text + "." + name;
  }
  return "value";
}

PickleRef PickleValue::None() { return std::make_shared<PickleValue>(); }

PickleRef PickleValue::Int(std::int64_t v) {
  auto p = std::make_shared<PickleValue>();
  p->kind = Kind::kInt;
  p->integer = v;
  return p;
}

PickleRef PickleValue::Tuple(std::vector<PickleRef> items) {
  auto p = std::make_shared<PickleValue>();
  p->kind = Kind::kTuple;
  for (const auto& e : items) p->depth = std::max(p->depth, e->depth + 1);
  p->items = std::move(items);
  return p;
}

PickleRef PickleValue::Dict() {
  auto p = std::make_shared<PickleValue>();
  p->kind = Kind::kDict;
  return p;
}

PickleRef PickleValue::NDArray(std::string record) {
  auto p = std::make_shared<PickleValue>();
  p->kind = Kind::kNDArray;
  p->text = std::move(record);
  p->built = true;
  return p;
}

void PickleValue::AddItem(PickleRef key, PickleRef value) {
  depth = std::max(depth, std::max(key->depth, value->depth) + 1);
  for (std::size_t i = 0; i < items.size(); i += 2) {
    if (KeysEqual(*items[i], *key)) {
      items[i + 1] = std::move(value);  // Python keeps the first key object and the last value
      return;
    }
  }
  items.push_back(std::move(key));
  items.push_back(std::move(value));
}

PickleRef ParsePickle(std::string_view data, const std::string& source) { return Parser(data, source).Run(); }

std::string WritePickle(const PickleValue& value) { return Writer().Run(value); }

}  // namespace troupe::internal
