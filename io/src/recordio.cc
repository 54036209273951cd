// dmlc RecordIO (.rec), its .idx index, and MXNet's image-record header. Byte layout: ../shared/formats.md §3.
//
// The writer splits a payload on every 4-byte-aligned occurrence of the magic exactly as dmlc-core's
// RecordIOWriter::WriteRecord does, so files are byte-identical to MXNet's. The reader is dmlc's sequential
// reader plus the checks dmlc skips (cflag range, the 1 (2)* 3 chunk sequence, truncation), each reported as a
// troupe::Error naming the file and the byte offset.
#include "io/recordio.h"

#include <sys/stat.h>

#include <array>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string_view>

#include "base/error.h"

namespace troupe {
namespace {

constexpr std::uint32_t kLengthMask = (1U << 29) - 1;
// The magic as it lies on disk (little endian), for the byte-wise scan of payloads.
constexpr std::array<char, 4> kMagicBytes = {'\x0a', '\x23', '\xd7', '\xce'};
// Large stdio buffers: records are typically a few KB to a few hundred KB (encoded images).
constexpr std::size_t kIOBufferBytes = 1 << 20;

enum ChunkFlag : std::uint32_t { kWhole = 0, kFirst = 1, kMiddle = 2, kLast = 3 };

void PutU32(std::uint32_t v, char* out) {
  for (int i = 0; i < 4; ++i) out[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}
std::uint32_t GetU32(const char* in) {
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<std::uint32_t>(static_cast<unsigned char>(in[i])) << (8 * i);
  return v;
}
void PutU64(std::uint64_t v, char* out) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}
std::uint64_t GetU64(const char* in) {
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<std::uint64_t>(static_cast<unsigned char>(in[i])) << (8 * i);
  return v;
}
void PutF32(float f, char* out) {
  std::uint32_t v;
  std::memcpy(&v, &f, 4);
  PutU32(v, out);
}
float GetF32(const char* in) {
  std::uint32_t v = GetU32(in);
  float f;
  std::memcpy(&f, &v, 4);
  return f;
}

std::string Hex(std::uint32_t v) {
  std::ostringstream os;
  os << "0x" << std::hex << v;
  return os.str();
}

struct FileCloser {
  void operator()(std::FILE* f) const {
    if (f != nullptr) std::fclose(f);
  }
};
using FilePtr = std::unique_ptr<std::FILE, FileCloser>;

std::string ErrnoText() { return std::strerror(errno); }

}  // namespace

// ------------------------------------------------------------------------------------------------ writer

struct RecordIOWriter::Impl {
  std::string path;
  std::vector<char> buffer;  // stdio buffer: declared before `file` so it outlives the FILE that uses it
  FilePtr file;
  std::uint64_t offset = 0;  // bytes written so far = offset of the next record

  void Put(const void* data, std::size_t size) {
    if (size == 0) return;
    if (std::fwrite(data, 1, size, file.get()) != size) {
      throw Error("RecordIO file '" + path + "': write failed at byte offset " + std::to_string(offset) + ": " +
                  ErrnoText() + "; check free disk space and permissions");
    }
    offset += size;
  }
  void PutChunk(std::uint32_t cflag, const char* data, std::uint32_t size) {
    std::array<char, 8> header;
    PutU32(kRecordIOMagic, header.data());
    PutU32((cflag << 29) | size, header.data() + 4);
    Put(header.data(), header.size());
    Put(data, size);
  }
};

RecordIOWriter::RecordIOWriter(const std::string& path) : impl_(std::make_unique<Impl>()) {
  impl_->path = path;
  impl_->file.reset(std::fopen(path.c_str(), "wb"));
  if (!impl_->file) {
    throw Error("RecordIOWriter: cannot create '" + path + "': " + ErrnoText() +
                "; check that the directory exists and is writable");
  }
  impl_->buffer.resize(kIOBufferBytes);
  std::setvbuf(impl_->file.get(), impl_->buffer.data(), _IOFBF, impl_->buffer.size());
}

RecordIOWriter::~RecordIOWriter() {
  try {
    Close();
  } catch (...) {
    // Destructors must not throw; callers who care about write errors call Close() themselves.
  }
}

std::uint64_t RecordIOWriter::Write(const void* data, std::size_t size) {
  Impl& m = *impl_;
  if (!m.file) {
    throw Error("RecordIOWriter: Write on '" + m.path + "' after Close(); open a new writer");
  }
  if (size > kLengthMask) {
    // The length word has 29 bits; dmlc aborts here, we refuse the record and keep the file valid.
    throw Error("RecordIOWriter: record of " + std::to_string(size) + " bytes for '" + m.path +
                "' exceeds the RecordIO limit of " + std::to_string(kLengthMask) + " bytes; split the payload");
  }
  const std::uint64_t start = m.offset;
  const char* bytes = static_cast<const char*>(data);
  const auto len = static_cast<std::uint32_t>(size);
  const std::uint32_t lower_align = len & ~3U;
  std::uint32_t dptr = 0;
  // Only whole aligned words are scanned, exactly like dmlc: a magic at an unaligned offset, or in the
  // trailing len % 4 bytes, stays in the data. Each aligned magic ends a chunk and is dropped from the stored
  // bytes; the reader puts it back between chunks.
  for (std::uint32_t i = 0; i < lower_align; i += 4) {
    if (std::memcmp(bytes + i, kMagicBytes.data(), 4) == 0) {
      m.PutChunk(dptr == 0 ? kFirst : kMiddle, bytes + dptr, i - dptr);
      dptr = i + 4;
    }
  }
  m.PutChunk(dptr != 0 ? kLast : kWhole, bytes + dptr, len - dptr);
  const std::uint32_t pad = (4 - len % 4) % 4;
  static constexpr std::array<char, 4> kZeros = {0, 0, 0, 0};
  m.Put(kZeros.data(), pad);
  return start;
}

void RecordIOWriter::Close() {
  Impl& m = *impl_;
  if (!m.file) return;
  std::FILE* f = m.file.release();
  const bool flush_failed = std::fflush(f) != 0 || std::ferror(f) != 0;
  const std::string flush_error = flush_failed ? ErrnoText() : "";
  const bool close_failed = std::fclose(f) != 0;
  if (flush_failed || close_failed) {
    throw Error("RecordIO file '" + m.path + "': flushing " + std::to_string(m.offset) +
                " bytes failed: " + (flush_failed ? flush_error : ErrnoText()) + "; check free disk space");
  }
}

// ------------------------------------------------------------------------------------------------ reader

struct RecordIOReader::Impl {
  std::string path;
  std::vector<char> buffer;
  FilePtr file;
  std::uint64_t pos = 0;        // byte offset of the next unread byte = next record (between records)
  std::uint64_t file_size = 0;  // refreshed on open and Seek; bounds chunk lengths before allocating

  [[noreturn]] void Fail(std::uint64_t offset, const std::string& what) const {
    throw Error("RecordIO file '" + path + "': " + what + " at byte offset " + std::to_string(offset) +
                "; the file is corrupt or truncated (re-create it, or check the .idx offset)");
  }

  void RefreshSize() {
    struct stat st {};
    if (fstat(fileno(file.get()), &st) == 0) file_size = static_cast<std::uint64_t>(st.st_size);
  }

  // Reads up to `size` bytes; returns how many were read (short only at end of file).
  std::size_t Get(void* out, std::size_t size) {
    if (size == 0) return 0;
    std::size_t n = std::fread(out, 1, size, file.get());
    if (n < size && std::ferror(file.get()) != 0) {
      throw Error("RecordIO file '" + path + "': read error at byte offset " + std::to_string(pos + n) + ": " +
                  ErrnoText());
    }
    pos += n;
    return n;
  }

  void SeekTo(std::uint64_t offset) {
    if (fseeko(file.get(), static_cast<off_t>(offset), SEEK_SET) != 0) {
      throw Error("RecordIO file '" + path + "': cannot seek to byte offset " + std::to_string(offset) + ": " +
                  ErrnoText());
    }
    pos = offset;
  }

  bool Next(std::string* out) {
    const std::uint64_t record_start = pos;
    out->clear();
    std::uint32_t prev_flag = kWhole;
    bool first = true;
    while (true) {
      const std::uint64_t chunk_start = pos;
      std::array<char, 8> header;
      const std::size_t got = Get(header.data(), header.size());
      if (got == 0 && first) return false;  // clean end of file between records
      if (got == 0) {
        Fail(chunk_start, "record starting at byte offset " + std::to_string(record_start) +
                              " ends without its last chunk (continuation flag " + std::to_string(prev_flag) +
                              " followed by end of file)");
      }
      if (got < header.size()) {
        Fail(chunk_start, "truncated chunk header (" + std::to_string(got) + " of 8 bytes)");
      }
      const std::uint32_t magic = GetU32(header.data());
      if (magic != kRecordIOMagic) {
        Fail(chunk_start, "wrong magic " + Hex(magic) + " (expected " + Hex(kRecordIOMagic) + ")");
      }
      const std::uint32_t lrec = GetU32(header.data() + 4);
      const std::uint32_t cflag = lrec >> 29;
      const std::uint32_t len = lrec & kLengthMask;
      if (cflag > kLast) {
        Fail(chunk_start, "invalid continuation flag " + std::to_string(cflag) + " (must be 0..3)");
      }
      // Legal sequences are 0 or 1 (2)* 3: the first chunk is 0 or 1, later ones are 2 or 3.
      const bool flag_ok = first ? (cflag == kWhole || cflag == kFirst) : (cflag == kMiddle || cflag == kLast);
      if (!flag_ok) {
        Fail(chunk_start, "bad continuation sequence: chunk flag " + std::to_string(cflag) +
                              (first ? " cannot start a record (expected 0 or 1)"
                                     : " cannot follow flag " + std::to_string(prev_flag) + " (expected 2 or 3)"));
      }
      const std::uint64_t padded = (static_cast<std::uint64_t>(len) + 3) & ~std::uint64_t{3};
      // Check against the file size before allocating, so a corrupt length cannot ask for 512 MB.
      if (pos + padded > file_size) RefreshSize();
      if (pos + padded > file_size) {
        Fail(chunk_start, "truncated chunk: header says " + std::to_string(len) + " bytes but only " +
                              std::to_string(file_size > pos ? file_size - pos : 0) + " remain");
      }
      if (!first) out->append(kMagicBytes.data(), kMagicBytes.size());  // the magic the writer dropped
      const std::size_t old = out->size();
      out->resize(old + padded);
      const std::size_t n = Get(out->data() + old, padded);
      if (n < padded) {
        Fail(chunk_start, "truncated chunk: header says " + std::to_string(len) + " bytes but only " +
                              std::to_string(n) + " could be read");
      }
      out->resize(old + len);
      if (cflag == kWhole || cflag == kLast) return true;
      prev_flag = cflag;
      first = false;
    }
  }
};

RecordIOReader::RecordIOReader(const std::string& path) : impl_(std::make_unique<Impl>()) {
  impl_->path = path;
  impl_->file.reset(std::fopen(path.c_str(), "rb"));
  if (!impl_->file) {
    throw Error("RecordIOReader: cannot open '" + path + "': " + ErrnoText() +
                "; check the path (a .rec file written by im2rec or RecordIOWriter)");
  }
  impl_->buffer.resize(kIOBufferBytes);
  std::setvbuf(impl_->file.get(), impl_->buffer.data(), _IOFBF, impl_->buffer.size());
  impl_->RefreshSize();
}

RecordIOReader::~RecordIOReader() = default;

bool RecordIOReader::Next(std::string* out) {
  Impl& m = *impl_;
  const std::uint64_t record_start = m.pos;
  try {
    return m.Next(out);
  } catch (...) {
    // Leave the reader at the start of the bad record, so Tell() names it and a retry reports the same error.
    try {
      m.SeekTo(record_start);
    } catch (...) {
    }
    throw;
  }
}

void RecordIOReader::Seek(std::uint64_t offset) {
  Impl& m = *impl_;
  if (offset % 4 != 0) {
    throw Error("RecordIO file '" + m.path + "': cannot seek to byte offset " + std::to_string(offset) +
                ": records start at multiples of 4; check the .idx file");
  }
  m.RefreshSize();
  if (offset > m.file_size) {
    throw Error("RecordIO file '" + m.path + "': cannot seek to byte offset " + std::to_string(offset) +
                ": the file has only " + std::to_string(m.file_size) + " bytes; the .idx does not match the .rec");
  }
  m.SeekTo(offset);
}

std::uint64_t RecordIOReader::Tell() const { return impl_->pos; }

const std::string& RecordIOReader::path() const { return impl_->path; }

// ------------------------------------------------------------------------------------------------ .idx

std::vector<std::pair<std::uint64_t, std::uint64_t>> ReadRecordIndex(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw Error("ReadRecordIndex: cannot open '" + path + "': " + ErrnoText() +
                "; check the path (the .idx written next to the .rec)");
  }
  std::vector<std::pair<std::uint64_t, std::uint64_t>> index;
  std::string line;
  std::size_t line_no = 0;
  auto parse = [](std::string_view s, std::uint64_t* v) {
    if (s.empty()) return false;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *v);
    return ec == std::errc() && p == s.data() + s.size();
  };
  while (std::getline(in, line)) {
    ++line_no;
    // Python's reader strips the line; do the same for \r\n files and stray spaces.
    std::string_view s(line);
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
    if (s.empty()) continue;  // blank lines carry no record
    const auto tab = s.find('\t');
    std::uint64_t key = 0;
    std::uint64_t offset = 0;
    if (tab == std::string_view::npos || !parse(s.substr(0, tab), &key) || !parse(s.substr(tab + 1), &offset)) {
      throw Error("ReadRecordIndex: '" + path + "' line " + std::to_string(line_no) + ": expected " +
                  "'<key>\\t<offset>' with two unsigned integers, got '" + std::string(s.substr(0, 80)) +
                  "'; regenerate the .idx (MXIndexedRecordIO or WriteRecordIndex)");
    }
    if (offset % 4 != 0) {
      throw Error("ReadRecordIndex: '" + path + "' line " + std::to_string(line_no) + ": offset " +
                  std::to_string(offset) + " is not a multiple of 4, so no record can start there; " +
                  "regenerate the .idx");
    }
    index.emplace_back(key, offset);
  }
  if (in.bad()) {
    throw Error("ReadRecordIndex: read error in '" + path + "' after line " + std::to_string(line_no));
  }
  return index;
}

void WriteRecordIndex(const std::string& path, const std::vector<std::pair<std::uint64_t, std::uint64_t>>& index) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) {
    throw Error("WriteRecordIndex: cannot create '" + path + "': " + ErrnoText() +
                "; check that the directory exists and is writable");
  }
  for (const auto& [key, offset] : index) out << key << '\t' << offset << '\n';
  out.flush();
  if (!out) throw Error("WriteRecordIndex: writing '" + path + "' failed; check free disk space");
}

// ------------------------------------------------------------------------------------------------ IRHeader

namespace {
constexpr std::size_t kIRHeaderBytes = 24;
}  // namespace

std::string PackImageRecord(const ImageRecordHeader& header, const std::string& payload) {
  if (header.flag != header.labels.size()) {
    throw Error("PackImageRecord: header.flag is " + std::to_string(header.flag) + " but header.labels has " +
                std::to_string(header.labels.size()) + " entries; set flag = labels.size() (0 for a single " +
                "label in header.label)");
  }
  std::string out(kIRHeaderBytes + 4 * header.labels.size() + payload.size(), '\0');
  char* p = out.data();
  PutU32(header.flag, p);
  PutF32(header.label, p + 4);
  PutU64(header.id, p + 8);
  PutU64(header.id2, p + 16);
  p += kIRHeaderBytes;
  for (float l : header.labels) {
    PutF32(l, p);
    p += 4;
  }
  if (!payload.empty()) std::memcpy(p, payload.data(), payload.size());
  return out;
}

ImageRecordHeader UnpackImageRecord(const std::string& record, std::string* payload, const std::string& where) {
  if (record.size() < kIRHeaderBytes) {
    throw Error(where + ": image record is " + std::to_string(record.size()) + " bytes, shorter than the " +
                std::to_string(kIRHeaderBytes) + "-byte IRHeader; the record is not an MXNet image record");
  }
  ImageRecordHeader h;
  const char* p = record.data();
  h.flag = GetU32(p);
  h.label = GetF32(p + 4);
  h.id = GetU64(p + 8);
  h.id2 = GetU64(p + 16);
  const std::uint64_t need = kIRHeaderBytes + 4 * static_cast<std::uint64_t>(h.flag);
  if (record.size() < need) {
    throw Error(where + ": image record is " + std::to_string(record.size()) + " bytes but its IRHeader flag " +
                std::to_string(h.flag) + " needs " + std::to_string(need) + " bytes of header and labels; " +
                "the record is corrupt or not an MXNet image record");
  }
  h.labels.resize(h.flag);
  for (std::uint32_t i = 0; i < h.flag; ++i) h.labels[i] = GetF32(p + kIRHeaderBytes + 4 * i);
  if (payload != nullptr) payload->assign(record, need, std::string::npos);
  return h;
}

}  // namespace troupe
