// `troupe im2rec` (see im2rec_command.h).
#include "tools/im2rec_command.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
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
    "and --pass-through, simplified: it does not resize or re-encode.\n\n"
    "LIST has one line per image: index<TAB>label[<TAB>label...]<TAB>relative/path (at least three tab-separated "
    "fields; blank lines are skipped). The bytes of ROOT/relative/path (JPEG, PNG, anything) are stored unchanged "
    "behind MXNet's image-record header: id = index; one label is stored in the header's label field (flag 0), "
    "several as flag = count followed by the float labels. Records are written in list order; OUT_PREFIX.idx has "
    "one 'index<TAB>byte offset' line per record.\n\n"
    "The whole list is checked before anything is written. Errors name the list file and line (a malformed "
    "line, a bad index or label, an index used twice) or the image path (missing or unreadable); on an error "
    "the partial output files are removed. Progress goes to stderr. Exit status: 0 done, 1 an error, 2 bad "
    "usage.";

constexpr const char* kListDescription =
    "With --list, it makes the lists instead (MXNet's im2rec.py --list, same order and split): troupe im2rec "
    "--list PREFIX ROOT lists the images under ROOT with the --exts extensions; with --recursive every "
    "sub-folder holding images is a class, labelled 0, 1, ... in the order the walk meets them (folders and "
    "files in name order, the root's own images first), and 'folder label' lines go to stdout. The list is "
    "shuffled as MXNet shuffles it (Python's random.seed(100); random.shuffle) unless --no-shuffle, cut into "
    "--chunks lists, and each chunk split into PREFIX_test.lst (its first --test-ratio), PREFIX_train.lst "
    "(the next --train-ratio) and PREFIX_val.lst (the rest) when --train-ratio is below 1, else written as "
    "PREFIX.lst.";

constexpr const char* kExamples =
    "Examples:\n"
    "  troupe im2rec --list --recursive --train-ratio 0.8 data/pets images/\n"
    "      images/<class>/*.jpg -> data/pets_train.lst and data/pets_val.lst, one label per class folder\n"
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

// Python's random module as MXNet's im2rec.py uses it (random.seed(100); random.shuffle(list)): MT19937
// seeded by init_by_array with the seed's 32-bit words, and shuffle's _randbelow from getrandbits, so that
// the lists come out in the same order as MXNet's.
class PythonRandom {
 public:
  explicit PythonRandom(std::uint32_t seed) {
    mt_[0] = 19650218u;  // init_genrand(19650218), then init_by_array({seed})
    for (std::size_t i = 1; i < kN; ++i) mt_[i] = 1812433253u * (mt_[i - 1] ^ (mt_[i - 1] >> 30)) + static_cast<std::uint32_t>(i);
    std::size_t i = 1;
    for (std::size_t k = kN; k > 0; --k) {
      mt_[i] = (mt_[i] ^ ((mt_[i - 1] ^ (mt_[i - 1] >> 30)) * 1664525u)) + seed;  // + key[j] + j, j always 0
      if (++i >= kN) {
        mt_[0] = mt_[kN - 1];
        i = 1;
      }
    }
    for (std::size_t k = kN - 1; k > 0; --k) {
      mt_[i] = (mt_[i] ^ ((mt_[i - 1] ^ (mt_[i - 1] >> 30)) * 1566083941u)) - static_cast<std::uint32_t>(i);
      if (++i >= kN) {
        mt_[0] = mt_[kN - 1];
        i = 1;
      }
    }
    mt_[0] = 0x80000000u;
  }

  // random.shuffle(x): for i from n-1 down to 1, swap x[i] with x[randbelow(i + 1)].
  template <typename T>
  void Shuffle(std::vector<T>* x) {
    for (std::size_t i = x->size(); i-- > 1;) std::swap((*x)[i], (*x)[Below(static_cast<std::uint32_t>(i + 1))]);
  }

 private:
  static constexpr std::size_t kN = 624;
  std::uint32_t Next() {
    if (index_ >= kN) {
      for (std::size_t k = 0; k < kN; ++k) {
        const std::uint32_t y = (mt_[k] & 0x80000000u) | (mt_[(k + 1) % kN] & 0x7fffffffu);
        mt_[k] = mt_[(k + 397) % kN] ^ (y >> 1) ^ ((y & 1u) != 0 ? 0x9908b0dfu : 0u);
      }
      index_ = 0;
    }
    std::uint32_t y = mt_[index_++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    return y ^ (y >> 18);
  }
  // _randbelow_with_getrandbits(n): getrandbits(n.bit_length()) until it is below n.
  std::uint32_t Below(std::uint32_t n) {
    int bits = 0;
    while ((n >> bits) != 0) ++bits;
    for (;;) {
      const std::uint32_t r = Next() >> (32 - bits);
      if (r < n) return r;
    }
  }
  std::uint32_t mt_[kN];
  std::size_t index_ = kN;
};

struct Listed {
  std::int64_t index;
  std::string path;  // relative to the root
  int label;
};

bool HasExtension(const std::filesystem::path& file, const std::vector<std::string>& exts) {
  std::string ext = file.extension().string();
  for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return std::find(exts.begin(), exts.end(), ext) != exts.end();
}

// The sorted names of `dir`'s entries: its files and its folders (links followed, as os.walk(followlinks=True)).
void SortedEntries(const std::filesystem::path& dir, std::vector<std::string>* files, std::vector<std::string>* dirs) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    (entry.is_directory(ec) ? dirs : files)->push_back(entry.path().filename().string());
  }
  if (ec) throw Error("im2rec: can not read the folder '" + dir.string() + "': " + ec.message());
  std::sort(files->begin(), files->end());
  std::sort(dirs->begin(), dirs->end());
}

// MXNet's list_image: recursive, folders top-down in name order, each folder with images a label in the
// order they are met (the root's own images first); else the root's images, all label 0.
void ListImages(const std::filesystem::path& root, const std::filesystem::path& dir, const Im2RecListOptions& o,
                std::vector<Listed>* out, std::vector<std::string>* labels) {
  std::vector<std::string> files, dirs;
  SortedEntries(dir, &files, &dirs);
  int label = -1;
  for (const std::string& name : files) {
    const std::filesystem::path file = dir / name;
    std::error_code ec;
    if (!std::filesystem::is_regular_file(file, ec) || !HasExtension(file, o.exts)) continue;
    if (label < 0) {
      label = o.recursive ? static_cast<int>(labels->size()) : 0;
      if (o.recursive) labels->push_back(std::filesystem::relative(dir, root).string());
    }
    out->push_back({static_cast<std::int64_t>(out->size()), std::filesystem::relative(file, root).string(), label});
  }
  if (!o.recursive) return;
  for (const std::string& name : dirs) ListImages(root, dir / name, o, out, labels);
}

// write_list: "index\tlabel (%f)\tpath" per line.
void WriteList(const std::string& path, std::vector<Listed>::const_iterator begin,
               std::vector<Listed>::const_iterator end) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) throw Error("im2rec: can not write the list '" + path + "' (check the folder)");
  for (auto it = begin; it != end; ++it) {
    std::fprintf(f, "%lld\t%f\t%s\n", static_cast<long long>(it->index), static_cast<double>(it->label), it->path.c_str());
  }
  if (std::fclose(f) != 0) throw Error("im2rec: write error on the list '" + path + "'");
  std::fprintf(stderr, "im2rec: wrote %s (%lld images)\n", path.c_str(), static_cast<long long>(end - begin));
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

std::vector<std::string> RunIm2RecList(const Im2RecListOptions& o) {
  const std::filesystem::path root(o.root);
  if (!std::filesystem::is_directory(root)) throw Error("im2rec: ROOT '" + o.root + "' is not a directory");
  if (o.chunks < 1) throw Error("im2rec: --chunks must be at least 1");
  if (o.train_ratio < 0 || o.test_ratio < 0 || o.train_ratio + o.test_ratio > 1.0) {
    throw Error("im2rec: --train-ratio and --test-ratio must be >= 0 and add up to at most 1");
  }
  std::vector<Listed> images;
  std::vector<std::string> labels;
  ListImages(root, root, o, &images, &labels);
  for (std::size_t i = 0; i < labels.size(); ++i) std::printf("%s %zu\n", labels[i].c_str(), i);  // as MXNet prints it
  if (images.empty()) std::fprintf(stderr, "im2rec: warning: no images with the extensions given under '%s'\n", o.root.c_str());
  if (o.shuffle) PythonRandom(o.seed).Shuffle(&images);
  const std::int64_t n = static_cast<std::int64_t>(images.size());
  const std::int64_t chunk_size = (n + o.chunks - 1) / o.chunks;
  std::vector<std::string> written;
  const auto write = [&](const std::string& path, std::int64_t b, std::int64_t e) {
    b = std::clamp<std::int64_t>(b, 0, n);
    e = std::clamp<std::int64_t>(e, b, n);
    WriteList(path, images.begin() + b, images.begin() + e);
    written.push_back(path);
  };
  for (int c = 0; c < o.chunks; ++c) {
    const std::int64_t begin = c * chunk_size, end = std::min(n, (c + 1) * chunk_size);
    const std::string prefix = o.prefix + (o.chunks > 1 ? "_" + std::to_string(c) : "");
    // MXNet's split: the first test_ratio of the chunk is test, the next train_ratio train, the rest val.
    const auto sep = static_cast<std::int64_t>(static_cast<double>(chunk_size) * o.train_ratio);
    const auto sep_test = static_cast<std::int64_t>(static_cast<double>(chunk_size) * o.test_ratio);
    if (o.train_ratio == 1.0) {
      write(prefix + ".lst", begin, end);
      continue;
    }
    if (o.test_ratio != 0) write(prefix + "_test.lst", begin, std::min(end, begin + sep_test));
    if (o.train_ratio + o.test_ratio < 1.0) write(prefix + "_val.lst", begin + sep_test + sep, end);
    write(prefix + "_train.lst", begin + sep_test, std::min(end, begin + sep_test + sep));
  }
  return written;
}

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
                              "Pack the images of an MXNet .lst file into a .rec and .idx (ImageRecordIter's input), "
                              "or make the .lst (--list)");
  app_->footer(std::string(kDescription) + "\n\n" + kListDescription + "\n\n" + kExamples + "\n");
  // Not ->required(): with --list they are PREFIX ROOT, without it LIST ROOT OUT_PREFIX (Run checks).
  app_->add_option("LIST", options_.list_path,
                   "The .lst file: index<TAB>label[<TAB>label...]<TAB>relative/path per line (--list: PREFIX)")
      ->type_name("LIST");
  app_->add_option("ROOT", options_.root, "The folder the list's paths are relative to")->type_name("ROOT");
  app_->add_option("OUT_PREFIX", options_.out_prefix, "Writes OUT_PREFIX.rec and OUT_PREFIX.idx (replacing them)")
      ->type_name("OUT_PREFIX");
  app_->add_option("--progress", options_.progress_every,
                   "Print a progress line to stderr every N images (and at the end); 0: none")
      ->check(CLI::NonNegativeNumber)
      ->type_name("N")
      ->capture_default_str();
  app_->add_flag("--list", list_, "Make PREFIX.lst from the images under ROOT instead of packing (im2rec.py --list)");
  app_->add_flag("--recursive", list_options_.recursive,
                 "--list: walk ROOT's sub-folders; each folder with images is a class (label 0, 1, ... in name order)");
  app_->add_option("--exts", list_options_.exts, "--list: image file extensions (case-insensitive)")
      ->delimiter(',')
      ->capture_default_str();
  app_->add_option("--chunks", list_options_.chunks, "--list: split into this many lists (PREFIX_0, PREFIX_1, ...)")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  app_->add_option("--train-ratio", list_options_.train_ratio,
                   "--list: the share for PREFIX_train.lst (below 1: the rest goes to _val, and _test)")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  app_->add_option("--test-ratio", list_options_.test_ratio, "--list: the share for PREFIX_test.lst")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  app_->add_flag("--shuffle,!--no-shuffle", list_options_.shuffle,
                 "--list: shuffle the images as MXNet does (default on)");
  app_->add_option("--seed", list_options_.seed, "--list: the shuffle's seed (MXNet always uses 100)")
      ->capture_default_str();
  app_->allow_extras(false);
}

bool Im2RecCommand::chosen() const { return app_->parsed(); }

int Im2RecCommand::Run() {
  try {
    if (list_) {
      if (options_.list_path.empty() || options_.root.empty() || !options_.out_prefix.empty()) {
        std::fprintf(stderr, "troupe im2rec --list: give PREFIX and ROOT, e.g. troupe im2rec --list --recursive "
                             "data/train images/\n");
        return 2;
      }
      list_options_.prefix = options_.list_path;
      list_options_.root = options_.root;
      for (std::string& e : list_options_.exts) {
        for (char& c : e) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        if (e.empty() || e[0] != '.') e = "." + e;
      }
      RunIm2RecList(list_options_);
      return 0;
    }
    if (options_.out_prefix.empty()) {
      std::fprintf(stderr, "troupe im2rec: give LIST ROOT OUT_PREFIX (or --list PREFIX ROOT to make the list)\n");
      return 2;
    }
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
