// `troupe im2rec` (see im2rec_command.h).
#include "tools/im2rec_command.h"

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/error.h"
#include "io/recordio.h"

namespace troupe::tools {
namespace {

constexpr const char* kDescription =
    "Packs the images listed in an MXNet .lst file into OUT_PREFIX.rec (dmlc RecordIO) and OUT_PREFIX.idx, the "
    "files ImageRecordIter reads (path_imgrec, path_imgidx). This is MXNet's tools/im2rec.py with --pack-label "
    "and --pass-through, simplified: it does not make lists, resize or re-encode.\n\n"
    "LIST has one line per image: index<TAB>label[<TAB>label...]<TAB>relative/path (at least three tab-separated "
    "fields; blank lines are skipped). The bytes of ROOT/relative/path (JPEG, PNG, anything) are stored unchanged "
    "behind MXNet's image-record header: id = index; one label is stored in the header's label field (flag 0), "
    "several as flag = count followed by the float labels. Records are written in list order; OUT_PREFIX.idx has "
    "one 'index<TAB>byte offset' line per record.\n\n"
    "The whole list is checked before anything is written. Errors name the list file and line (a malformed "
    "line, a bad index or label, an index used twice) or the image path (missing or unreadable); on an error "
    "the partial output files are removed. Progress goes to stderr. Exit status: 0 done, 1 an error, 2 bad "
    "usage.";

constexpr const char* kExamples =
    "Examples:\n"
    "  troupe im2rec data/train.lst data/images data/train\n"
    "      reads data/train.lst, packs data/images/<path> of each line into data/train.rec and data/train.idx\n"
    "  troupe im2rec --progress 0 val.lst /data/val val\n"
    "      the same without progress lines\n"
    "A list line: 7<TAB>3.000000<TAB>cats/007.jpg (index 7, label 3); 8<TAB>1<TAB>0.5<TAB>dogs/008.jpg "
    "(two labels).";

struct ListEntry {
  std::uint64_t index = 0;
  std::vector<float> labels;
  std::string path;  // relative to the root
  std::int64_t line = 0;
};

std::vector<std::string> SplitTabs(const std::string& s) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (true) {
    const std::size_t tab = s.find('\t', start);
    if (tab == std::string::npos) {
      out.push_back(s.substr(start));
      return out;
    }
    out.push_back(s.substr(start, tab - start));
    start = tab + 1;
  }
}

std::string Trim(const std::string& s) {
  const std::size_t b = s.find_first_not_of(" \r\n");
  if (b == std::string::npos) return "";
  const std::size_t e = s.find_last_not_of(" \r\n");
  return s.substr(b, e - b + 1);
}

// The list, parsed and checked whole (so that a bad line fails before minutes of packing).
std::vector<ListEntry> ReadList(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error("im2rec: can not open the list file '" + path + "' (check the path)");
  std::vector<ListEntry> entries;
  std::unordered_map<std::uint64_t, std::int64_t> line_of_index;
  std::string raw;
  std::int64_t line_no = 0;
  while (std::getline(in, raw)) {
    ++line_no;
    // A trailing '\r' (a list written on Windows) is not part of the path.
    if (!raw.empty() && raw.back() == '\r') raw.pop_back();
    if (Trim(raw).empty()) continue;
    const std::string where = "im2rec: list file '" + path + "' line " + std::to_string(line_no) + ": ";
    const std::vector<std::string> f = SplitTabs(raw);
    if (f.size() < 3) {
      throw Error(where + "expected index<TAB>label[<TAB>label...]<TAB>path (3 or more tab-separated fields), got " +
                  std::to_string(f.size()) + " field(s): '" + raw + "'");
    }
    ListEntry e;
    e.line = line_no;
    const std::string index_text = Trim(f[0]);
    errno = 0;
    char* end = nullptr;
    const unsigned long long index = std::strtoull(index_text.c_str(), &end, 10);
    if (index_text.empty() || index_text[0] == '-' || end != index_text.c_str() + index_text.size() || errno != 0) {
      throw Error(where + "the index '" + f[0] + "' is not a non-negative integer");
    }
    e.index = index;
    for (std::size_t i = 1; i + 1 < f.size(); ++i) {
      const std::string t = Trim(f[i]);
      errno = 0;
      const float v = std::strtof(t.c_str(), &end);
      if (t.empty() || end != t.c_str() + t.size() || errno != 0 || !std::isfinite(v)) {
        throw Error(where + "label " + std::to_string(i) + " '" + f[i] + "' is not a finite number");
      }
      e.labels.push_back(v);
    }
    // A path may hold spaces (not tabs); only the line ending is trimmed, as MXNet's readers do.
    e.path = Trim(f.back());
    if (e.path.empty()) throw Error(where + "the image path (last field) is empty");
    const auto [it, inserted] = line_of_index.emplace(e.index, line_no);
    if (!inserted) {
      throw Error(where + "index " + std::to_string(e.index) + " was already used on line " +
                  std::to_string(it->second) + " (the .idx maps each index to one record; make the indices unique)");
    }
    entries.push_back(std::move(e));
  }
  if (in.bad()) throw Error("im2rec: read error on the list file '" + path + "'");
  return entries;
}

std::string ReadImage(const std::string& path, const ListEntry& e, const std::string& list_path) {
  std::ifstream in(path, std::ios::binary);
  const std::string origin = " (list file '" + list_path + "' line " + std::to_string(e.line) + ")";
  if (!in) {
    throw Error("im2rec: can not open the image '" + path + "'" + origin +
                (std::filesystem::exists(path) ? "" : ": no such file; check ROOT and the path in the list"));
  }
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw Error("im2rec: read error on the image '" + path + "'" + origin);
  return bytes;
}

// Removes the partial outputs unless Keep() was called: a failed run must not leave a .rec that looks usable.
class OutputGuard {
 public:
  OutputGuard(std::string rec, std::string idx) : rec_(std::move(rec)), idx_(std::move(idx)) {}
  ~OutputGuard() {
    if (keep_) return;
    std::error_code ec;
    std::filesystem::remove(rec_, ec);
    std::filesystem::remove(idx_, ec);
  }
  void Keep() { keep_ = true; }

 private:
  std::string rec_, idx_;
  bool keep_ = false;
};

}  // namespace

std::int64_t RunIm2Rec(const Im2RecOptions& o) {
  if (o.out_prefix.empty()) throw Error("im2rec: OUT_PREFIX is empty");
  const std::vector<ListEntry> entries = ReadList(o.list_path);
  const std::string rec_path = o.out_prefix + ".rec";
  const std::string idx_path = o.out_prefix + ".idx";
  const std::filesystem::path root(o.root);
  if (!std::filesystem::is_directory(root)) {
    throw Error("im2rec: ROOT '" + o.root + "' is not a directory (the list's paths are relative to it)");
  }
  OutputGuard guard(rec_path, idx_path);
  std::vector<std::pair<std::uint64_t, std::uint64_t>> index;
  index.reserve(entries.size());
  {
    RecordIOWriter writer(rec_path);
    std::int64_t done = 0;
    for (const ListEntry& e : entries) {
      const std::string image_path = (root / e.path).string();
      ImageRecordHeader h;
      h.id = e.index;
      if (e.labels.size() == 1) {
        h.label = e.labels[0];
      } else {
        h.flag = static_cast<std::uint32_t>(e.labels.size());
        h.labels = e.labels;
      }
      const std::uint64_t offset = writer.Write(PackImageRecord(h, ReadImage(image_path, e, o.list_path)));
      index.emplace_back(e.index, offset);
      ++done;
      if (o.progress_every > 0 && (done % o.progress_every == 0 || done == static_cast<std::int64_t>(entries.size()))) {
        std::fprintf(stderr, "im2rec: %lld/%zu images packed\n", static_cast<long long>(done), entries.size());
      }
    }
    writer.Close();
  }
  WriteRecordIndex(idx_path, index);
  guard.Keep();
  return static_cast<std::int64_t>(entries.size());
}

Im2RecCommand::Im2RecCommand(CLI::App* root) {
  app_ = root->add_subcommand("im2rec",
                              "Pack the images of an MXNet .lst file into a .rec and .idx (ImageRecordIter's input)");
  app_->footer(std::string(kDescription) + "\n\n" + kExamples + "\n");
  app_->add_option("LIST", options_.list_path,
                   "The .lst file: index<TAB>label[<TAB>label...]<TAB>relative/path per line")
      ->required()
      ->type_name("LIST");
  app_->add_option("ROOT", options_.root, "The folder the list's paths are relative to")->required()->type_name("ROOT");
  app_->add_option("OUT_PREFIX", options_.out_prefix, "Writes OUT_PREFIX.rec and OUT_PREFIX.idx (replacing them)")
      ->required()
      ->type_name("OUT_PREFIX");
  app_->add_option("--progress", options_.progress_every,
                   "Print a progress line to stderr every N images (and at the end); 0: none")
      ->check(CLI::NonNegativeNumber)
      ->type_name("N")
      ->capture_default_str();
  app_->allow_extras(false);
}

bool Im2RecCommand::chosen() const { return app_->parsed(); }

int Im2RecCommand::Run() {
  try {
    const std::int64_t n = RunIm2Rec(options_);
    std::fprintf(stderr, "im2rec: wrote %lld records to %s.rec and %s.idx\n", static_cast<long long>(n),
                 options_.out_prefix.c_str(), options_.out_prefix.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "troupe %s\n", e.what());
    return 1;
  }
}

}  // namespace troupe::tools
