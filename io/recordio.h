// dmlc RecordIO, the container of MXNet's .rec files, with its .idx index and MXNet's image-record header.
//
// Format (see ../shared/formats.md): a record is one or more chunks; a chunk is the magic 0xced7230a
// (little endian), a length word whose low 29 bits are the chunk's byte length and whose top 3 bits are the
// continuation flag (0 whole record, 1 first chunk, 2 middle, 3 last), then the bytes, padded with zeros to
// a multiple of 4. A payload that contains the magic at a 4-byte-aligned offset is split there into chunks
// (the magic itself is dropped from the stored bytes and restored on reading), so a reader can always
// resynchronise on the magic. An .idx file has one "key\toffset" line per record (offset in bytes of the
// record's first chunk).
//
// Thread-safety: a writer or reader is used by one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace troupe {

inline constexpr std::uint32_t kRecordIOMagic = 0xced7230a;

class RecordIOWriter {
 public:
  // Creates (truncates) `path`. Throws troupe::Error naming the file when it cannot be opened.
  explicit RecordIOWriter(const std::string& path);
  ~RecordIOWriter();
  RecordIOWriter(const RecordIOWriter&) = delete;
  RecordIOWriter& operator=(const RecordIOWriter&) = delete;
  // Appends one record; returns the byte offset of its first chunk (what the .idx stores).
  std::uint64_t Write(const void* data, std::size_t size);
  std::uint64_t Write(const std::string& record) { return Write(record.data(), record.size()); }
  // Flushes and closes; throws troupe::Error on a write error. Called by the destructor (which swallows
  // errors), so call it to see them.
  void Close();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

class RecordIOReader {
 public:
  // Opens `path`. Throws troupe::Error naming the file when it is missing or unreadable.
  explicit RecordIOReader(const std::string& path);
  ~RecordIOReader();
  RecordIOReader(const RecordIOReader&) = delete;
  RecordIOReader& operator=(const RecordIOReader&) = delete;
  // Reads the next record into *out; false at a clean end of file. A wrong magic, a bad continuation flag or
  // a truncated chunk is a troupe::Error naming the file and the byte offset.
  bool Next(std::string* out);
  // Moves to the record starting at byte `offset` (from an .idx file).
  void Seek(std::uint64_t offset);
  // Byte offset of the next record.
  std::uint64_t Tell() const;
  const std::string& path() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// Reads an .idx file: (key, offset) pairs in file order. A malformed line is a troupe::Error naming the file
// and the line number.
std::vector<std::pair<std::uint64_t, std::uint64_t>> ReadRecordIndex(const std::string& path);
// Writes an .idx file.
void WriteRecordIndex(const std::string& path, const std::vector<std::pair<std::uint64_t, std::uint64_t>>& index);

// MXNet's image-record header (IRHeader), packed in front of the image bytes: flag (uint32), label (float),
// id and id2 (uint64); when flag > 0, `flag` float labels follow the header and `label` is ignored.
struct ImageRecordHeader {
  std::uint32_t flag = 0;
  float label = 0;
  std::uint64_t id = 0;
  std::uint64_t id2 = 0;
  std::vector<float> labels;  // the extra labels (flag of them)
};
// Header + labels + payload as one record.
std::string PackImageRecord(const ImageRecordHeader& header, const std::string& payload);
// Splits a record; throws troupe::Error naming `where` (file and offset) when it is too short.
ImageRecordHeader UnpackImageRecord(const std::string& record, std::string* payload, const std::string& where);

}  // namespace troupe
