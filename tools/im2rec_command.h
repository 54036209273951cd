// `troupe im2rec LIST ROOT OUT_PREFIX`: packs the images named by an MXNet .lst file into a RecordIO file and
// its index (MXNet's tools/im2rec.py with --pack-label and --pass-through, simplified: no resizing, no
// re-encoding). `troupe im2rec --list PREFIX ROOT` makes the .lst files from a folder of images, as
// im2rec.py --list does (RunIm2RecList).
//
// Every line of LIST is "index\tlabel[\tlabel...]\trelative/path" (see ../shared/formats.md §3.7). The file
// ROOT/relative/path is read whole and stored as-is behind MXNet's image-record header (PackImageRecord):
// id = index; one label goes into header.label (flag 0), several into the float labels that follow the
// header (flag = their count). Records go to OUT_PREFIX.rec in list order, and OUT_PREFIX.idx gets one
// "index\toffset" line per record.
//
// The whole list is parsed before anything is written, so a malformed line fails fast; on any error the
// partial .rec/.idx are removed and the message names the list file and line, or the image path.
//
// Thread-safety: none needed; used from main() only.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace troupe::tools {

struct Im2RecOptions {
  std::string list_path;
  std::string root;
  std::string out_prefix;
  // Print a progress line to stderr every this many images; 0 turns progress off.
  std::int64_t progress_every = 1000;
};

// Packs the images; returns the number of records written. Throws troupe::Error naming the list file and
// line (malformed line, duplicate index), the image path (missing or unreadable image), or the output file.
std::int64_t RunIm2Rec(const Im2RecOptions& options);

// `im2rec --list`: MXNet's im2rec.py make_list, with its defaults and its order.
struct Im2RecListOptions {
  std::string prefix;  // writes PREFIX.lst, or PREFIX_train.lst / _val.lst / _test.lst (and _<chunk> before them)
  std::string root;
  std::vector<std::string> exts{".jpeg", ".jpg", ".png"};  // lower case, compared with the lower-cased extension
  bool recursive = false;  // each sub-folder with images is a class (labels 0, 1, ... in the order met)
  bool shuffle = true;     // Python's random.seed(seed); random.shuffle, as MXNet does (seed 100 there)
  std::uint32_t seed = 100;
  int chunks = 1;
  double train_ratio = 1.0;
  double test_ratio = 0.0;
};

// Lists the images under ROOT (folders top-down in name order; the files of a folder in name order), shuffles,
// splits into chunks and train/val/test as MXNet does, writes the lists and returns their paths; prints each
// class folder and its label to stdout ("cats 0") as MXNet does. Throws troupe::Error for a bad ROOT, bad
// ratios or an unwritable list.
std::vector<std::string> RunIm2RecList(const Im2RecListOptions& options);

class Im2RecCommand {
 public:
  // Adds the `im2rec` subcommand to `root`.
  explicit Im2RecCommand(CLI::App* root);
  // True when the command line chose `troupe im2rec`.
  bool chosen() const;
  // Runs it; returns the exit status: 0 done, 1 an error (printed to stderr).
  int Run();

 private:
  CLI::App* app_ = nullptr;
  Im2RecOptions options_;
  Im2RecListOptions list_options_;
  bool list_ = false;
};

}  // namespace troupe::tools
