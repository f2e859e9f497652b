// Helpers of the image tests (image_*_test.cpp): the golden data of tests/golden/images
// (written by make_images.py from PIL 9.4, torchvision 0.14 and torch 1.13).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "loader/image/decode.h"
#include "test_util.h"

namespace loader::testing {

inline std::string image_golden(const std::string& name) { return golden_path("images/" + name); }
inline std::string image_file(const std::string& name) { return golden_path("images/files/" + name); }
inline nlohmann::json image_json(const std::string& name) {
  return nlohmann::json::parse(read_file(image_golden(name)));
}

inline std::vector<uint8_t> base64_decode(const std::string& s) {
  auto val = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  std::vector<uint8_t> out;
  uint32_t acc = 0;
  int bits = 0;
  for (char c : s) {
    const int v = val(c);
    if (v < 0) continue;  // '=' padding
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<uint8_t>((acc >> bits) & 0xff));
    }
  }
  return out;
}

/// Mean and largest absolute difference of two byte arrays of the same size.
struct Diff {
  double mean = 0;
  int max = 0;
  size_t differing = 0;
};
inline Diff byte_diff(const uint8_t* a, const uint8_t* b, size_t n) {
  Diff d;
  double sum = 0;
  for (size_t i = 0; i < n; ++i) {
    const int e = std::abs(int{a[i]} - int{b[i]});
    sum += e;
    if (e > d.max) d.max = e;
    if (e) ++d.differing;
  }
  d.mean = n ? sum / static_cast<double>(n) : 0.0;
  return d;
}

/// HWC bytes of a uint8 [C, H, W] tensor.
inline std::vector<uint8_t> chw_to_hwc(const Tensor& t) {
  const int64_t C = t.size(0), H = t.size(1), W = t.size(2);
  std::vector<uint8_t> out(static_cast<size_t>(C * H * W));
  const auto* p = static_cast<const uint8_t*>(t.data_ptr());
  for (int64_t c = 0; c < C; ++c)
    for (int64_t y = 0; y < H; ++y)
      for (int64_t x = 0; x < W; ++x) out[static_cast<size_t>((y * W + x) * C + c)] = p[(c * H + y) * W + x];
  return out;
}

/// The file's bytes (ASSERTs it is there).
inline std::string image_bytes(const std::string& name) {
  std::string b = read_file(image_file(name));
  EXPECT_FALSE(b.empty()) << image_file(name);
  return b;
}
inline const uint8_t* u8(const std::string& s) { return reinterpret_cast<const uint8_t*>(s.data()); }

}  // namespace loader::testing
