#include "loader/batch_copy.h"

#include <atomic>
#include <cstdint>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace loader {

namespace {
std::atomic<bool> streaming{false};

#if defined(__SSE2__)
// Unaligned loads, 16-byte aligned non-temporal stores, 64 bytes (a cache line) a step.
void stream_copy(uint8_t* d, const uint8_t* s, size_t n) noexcept {
  const size_t head = (16 - (reinterpret_cast<uintptr_t>(d) & 15)) & 15;
  std::memcpy(d, s, head);
  d += head;
  s += head;
  n -= head;
  for (size_t lines = n / 64; lines > 0; --lines) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 32));
    const __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(d), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + 48), e);
    d += 64;
    s += 64;
  }
  std::memcpy(d, s, n % 64);
  // Non-temporal stores are weakly ordered: fence them before the batch is published
  // (the ring write that hands the slab over is an ordinary store after this).
  _mm_sfence();
}
#endif
}  // namespace

void copy_into_batch(void* dst, const void* src, size_t n) noexcept {
  if (n == 0) return;  // an empty tensor's data pointer may be null
#if defined(__SSE2__)
  if (n >= kStreamingCopyMin && streaming.load(std::memory_order_relaxed)) {
    stream_copy(static_cast<uint8_t*>(dst), static_cast<const uint8_t*>(src), n);
    return;
  }
#endif
  std::memcpy(dst, src, n);
}

void set_batch_copy_streaming(bool on) noexcept { streaming.store(on, std::memory_order_relaxed); }
bool batch_copy_streaming() noexcept { return streaming.load(std::memory_order_relaxed); }

}  // namespace loader
