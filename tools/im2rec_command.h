// `troupe im2rec LIST ROOT OUT_PREFIX`: packs the images named by an MXNet .lst file into a RecordIO file and
// its index (MXNet's tools/im2rec.py with --pack-label and --pass-through, simplified: no resizing, no
// re-encoding, no list generation).
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
};

}  // namespace troupe::tools
