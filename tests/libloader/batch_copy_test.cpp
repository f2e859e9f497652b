// copy_into_batch: the same bytes as memcpy for every size and alignment, with the
// non-temporal stores of a worker process on and off.
#include "loader/batch_copy.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

namespace loader {
namespace {

class StreamingScope {
 public:
  explicit StreamingScope(bool on) : before_(batch_copy_streaming()) { set_batch_copy_streaming(on); }
  ~StreamingScope() { set_batch_copy_streaming(before_); }

 private:
  bool before_;
};

TEST(CopyIntoBatch, SameBytesAsMemcpyForEverySizeAndAlignment) {
  for (bool on : {false, true}) {
    StreamingScope scope(on);
    std::vector<uint8_t> src(kStreamingCopyMin * 3 + 200);
    for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 131 + 7);
    for (size_t n : {size_t{0}, size_t{1}, size_t{63}, size_t{4096}, kStreamingCopyMin - 1, kStreamingCopyMin,
                     kStreamingCopyMin + 1, kStreamingCopyMin * 2 + 77, kStreamingCopyMin * 3}) {
      for (size_t src_off : {0, 1, 8, 15}) {
        for (size_t dst_off : {0, 3, 16, 33}) {
          std::vector<uint8_t> dst(n + 128, 0xee);
          copy_into_batch(dst.data() + dst_off, src.data() + src_off, n);
          ASSERT_EQ(std::memcmp(dst.data() + dst_off, src.data() + src_off, n), 0)
              << "n " << n << " src+" << src_off << " dst+" << dst_off << " streaming " << on;
          // Nothing outside [dst_off, dst_off + n) was touched.
          for (size_t i = 0; i < dst_off; ++i) ASSERT_EQ(dst[i], 0xee);
          for (size_t i = dst_off + n; i < dst.size(); ++i) ASSERT_EQ(dst[i], 0xee);
        }
      }
    }
  }
}

TEST(CopyIntoBatch, NothingToCopyMayComeWithNullPointers) {
  // An empty tensor's data pointer is null; copying its zero bytes is a no-op.
  copy_into_batch(nullptr, nullptr, 0);
}

TEST(CopyIntoBatch, OffInTheMainProcessUntilTheRuntimeTurnsItOn) {
  // Only a worker process (run_worker_if_requested) turns the streaming stores on.
  EXPECT_FALSE(batch_copy_streaming());
}

}  // namespace
}  // namespace loader
