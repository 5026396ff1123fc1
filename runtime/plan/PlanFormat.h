// The frame around a plan's FlatBuffer, shared by the writer (mtc) and the reader
// (mtrun): a fixed header that says what the file is and which format version wrote
// it, so that a wrong version is named as such before any parsing, and a CRC-32
// trailer, so that a flipped bit anywhere is caught.
//
//   offset 0      "MTPL"
//   offset 4      format version, uint32 little-endian
//   offset 8      payload length N, uint64 little-endian
//   offset 16     payload: the FlatBuffer (root mt.plan.Plan, identifier "MTPL")
//   offset 16+N   CRC-32 (zlib) of bytes [0, 16+N), uint32 little-endian
#ifndef MT_RUNTIME_PLAN_PLANFORMAT_H
#define MT_RUNTIME_PLAN_PLANFORMAT_H

#include "plan_generated.h"

#include <cstdint>
#include <cstring>
#include <vector>

#include <zlib.h>

namespace mt::plan {

inline constexpr char kMagic[4] = {'M', 'T', 'P', 'L'};
// 4: attention's `window`, which a reader of 3 would skip, running the plan's attention
// unwindowed.
inline constexpr uint32_t kFormatVersion = 4;
inline constexpr size_t kHeaderBytes = 16;
inline constexpr size_t kTrailerBytes = 4;

inline uint32_t crc32Of(const uint8_t *data, size_t n) {
  return static_cast<uint32_t>(::crc32_z(::crc32_z(0, nullptr, 0), data, n));
}

inline void putLittleEndian(uint8_t *out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i)
    out[i] = static_cast<uint8_t>(value >> (8 * i));
}

inline uint64_t getLittleEndian(const uint8_t *in, int bytes) {
  uint64_t value = 0;
  for (int i = 0; i < bytes; ++i)
    value |= static_cast<uint64_t>(in[i]) << (8 * i);
  return value;
}

/// Header + payload + CRC, ready to write.
inline std::vector<uint8_t> framePlan(const uint8_t *payload, size_t n,
                                      uint32_t version = kFormatVersion) {
  std::vector<uint8_t> file(kHeaderBytes + n + kTrailerBytes);
  std::memcpy(file.data(), kMagic, 4);
  putLittleEndian(file.data() + 4, version, 4);
  putLittleEndian(file.data() + 8, n, 8);
  if (n)
    std::memcpy(file.data() + kHeaderBytes, payload, n);
  putLittleEndian(file.data() + kHeaderBytes + n, crc32Of(file.data(), kHeaderBytes + n), 4);
  return file;
}

} // namespace mt::plan

#endif
