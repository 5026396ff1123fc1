#include "train/TensorBoard.h"

#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>

namespace mt::tensorboard {
namespace {

// TFRecord's framing and the protocol-buffer wire format are little-endian; this writes
// the host's bytes as they are.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "event files are little-endian");

/// The CRC-32C table: reflected polynomial 0x82F63B78.
const std::array<uint32_t, 256> &table() {
  static const std::array<uint32_t, 256> t = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k)
        c = c & 1 ? 0x82F63B78u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  return t;
}

/// TFRecord's masked CRC: rotated and offset, so that a CRC of CRCs is not trivial.
uint32_t masked(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xA282EAD8u; }

// The protocol-buffer wire format: a field's key is its number and wire type.
void varint(std::string &out, uint64_t v) {
  for (; v >= 0x80; v >>= 7)
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
  out.push_back(static_cast<char>(v));
}
void key(std::string &out, int field, int wireType) { varint(out, uint64_t(field) << 3 | wireType); }
template <typename T> void fixed(std::string &out, int field, int wireType, T v) {
  key(out, field, wireType);
  char bytes[sizeof v];
  std::memcpy(bytes, &v, sizeof v); // little-endian, as the wire format is
  out.append(bytes, sizeof v);
}
void bytes(std::string &out, int field, const std::string &v) {
  key(out, field, 2);
  varint(out, v.size());
  out += v;
}

/// tensorflow.Event's fields: wall_time (1, double), step (2, int64), file_version (3,
/// string), summary (5, Summary), session_log (7, SessionLog); Summary's value (1,
/// repeated Value); Value's tag (1, string) and simple_value (2, float); SessionLog's
/// status (1, enum: START is 1).
std::string event(int64_t step) {
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  std::string e;
  fixed(e, 1, 1, now);
  key(e, 2, 0);
  varint(e, static_cast<uint64_t>(step));
  return e;
}

} // namespace

uint32_t crc32c(const void *data, size_t n) {
  uint32_t c = 0xFFFFFFFFu;
  for (const auto *p = static_cast<const uint8_t *>(data); n > 0; --n, ++p)
    c = table()[(c ^ *p) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

Status EventWriter::open(const std::string &dir, EventWriter &out) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    return Status::failure(cat(dir, ": cannot create: ", ec.message()));
  char host[256] = "localhost";
  ::gethostname(host, sizeof host - 1);
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(
                           std::chrono::system_clock::now().time_since_epoch())
                           .count();
  EventWriter w;
  w.path_ = cat(dir, "/events.out.tfevents.", seconds, ".", host, ".", ::getpid());
  w.file_.reset(std::fopen(w.path_.c_str(), "wbx")); // never another's file
  if (!w.file_)
    return Status::failure(cat(w.path_, ": cannot create: ", std::strerror(errno)));
  std::string first = event(0);
  bytes(first, 3, "brain.Event:2");
  MT_TRY(w.record(first));
  out = std::move(w);
  return Status::success();
}

Status EventWriter::scalars(int64_t step,
                            const std::vector<std::pair<std::string, double>> &values) {
  std::string summary;
  for (const auto &[tag, value] : values) {
    std::string v;
    bytes(v, 1, tag);
    // A finite double beyond float's range is float's infinity, not undefined behaviour.
    const double limit = std::numeric_limits<float>::max();
    fixed(v, 2, 5, static_cast<float>(std::isfinite(value) && std::abs(value) > limit
                                          ? std::copysign(HUGE_VAL, value)
                                          : value));
    bytes(summary, 1, v);
  }
  std::string e = event(step);
  bytes(e, 5, summary);
  return record(e);
}

Status EventWriter::restart(int64_t step) {
  std::string log;
  key(log, 1, 0);
  varint(log, 1); // SessionLog.START
  std::string e = event(step);
  bytes(e, 7, log);
  return record(e);
}

Status EventWriter::record(const std::string &data) {
  const uint64_t length = data.size();
  const uint32_t lengthCrc = masked(crc32c(&length, sizeof length));
  const uint32_t dataCrc = masked(crc32c(data.data(), data.size()));
  std::FILE *f = file_.get();
  if (std::fwrite(&length, sizeof length, 1, f) != 1 ||
      std::fwrite(&lengthCrc, sizeof lengthCrc, 1, f) != 1 ||
      std::fwrite(data.data(), 1, data.size(), f) != data.size() ||
      std::fwrite(&dataCrc, sizeof dataCrc, 1, f) != 1 || std::fflush(f) != 0)
    return Status::failure(cat(path_, ": cannot write: ", std::strerror(errno)));
  return Status::success();
}

} // namespace mt::tensorboard
