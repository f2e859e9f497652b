#include "loader/image/transforms.h"

#include <algorithm>
#include <atomic>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>

#include "loader/error.h"

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define LOADER_RESAMPLE_AVX2 1
#include <immintrin.h>
#endif

namespace loader::image {

// ------------------------------------------------------------------ torch's float32 math
// torch 1.13 on x86-64 runs its AVX2 kernels (the default on any CPU with AVX2): the
// float uniform_ is fused (FMA), and exp / log of float tensors are SLEEF's expf_u10 and
// logf_u10 (1-ulp functions, not glibc's correctly rounded ones: they differ for about 7%
// of the exponents RandomResizedCrop draws).  These are their scalar forms, with the FMA
// each AVX2 step uses (std::fmaf rounds once, as vfmadd does).
namespace {

float torch_uniform(uint32_t random, float from, float to) {
  const float x = static_cast<float>(random & ((1u << 24) - 1)) * (1.0f / 16777216.0f);
  return std::fmaf(x, to - from, from);
}

uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
float pow2i(int q) { return bits_float(static_cast<uint32_t>(q + 0x7f) << 23); }
float ldexp2(float d, int e) { return d * pow2i(e >> 1) * pow2i(e - (e >> 1)); }

float sleef_expf_u10(float d) {
  const float R_LN2f = 1.442695040888963407359924681001892137426645954152985934135449406931f;
  const float L2Uf = 0.693145751953125f;
  const float L2Lf = 1.428606765330187045e-06f;
  const int q = static_cast<int>(std::nearbyint(d * R_LN2f));
  float s = std::fmaf(static_cast<float>(q), -L2Uf, d);
  s = std::fmaf(static_cast<float>(q), -L2Lf, s);
  float u = 0.000198527617612853646278381f;
  u = std::fmaf(u, s, 0.00139304355252534151077271f);
  u = std::fmaf(u, s, 0.00833336077630519866943359f);
  u = std::fmaf(u, s, 0.0416664853692054748535156f);
  u = std::fmaf(u, s, 0.166666671633720397949219f);
  u = std::fmaf(u, s, 0.5f);
  u = 1.0f + std::fmaf(s * s, u, s);
  u = ldexp2(u, q);
  if (d < -104.0f) u = 0.0f;
  if (100.0f < d) u = std::numeric_limits<float>::infinity();
  return u;
}

struct F2 {
  float x, y;
};
F2 df_add2(float x, float y) {
  const float s = x + y;
  const float v = s - x;
  return {s, (x - (s - v)) + (y - v)};
}
F2 df_mul(F2 x, float y) {
  const float s = x.x * y;
  return {s, std::fmaf(x.y, y, std::fmaf(x.x, y, -s))};
}
F2 df_div(F2 n, F2 d) {
  const float t = 1.0f / d.x;
  const float s = n.x * t;
  const float u = std::fmaf(t, n.x, -s);
  const float v = std::fmaf(-d.y, t, std::fmaf(-d.x, t, 1.0f));
  return {s, std::fmaf(s, v, std::fmaf(n.y, t, u))};
}
F2 df_add(F2 x, F2 y) {
  const float s = x.x + y.x;
  return {s, (((x.x - s) + y.x) + x.y) + y.y};
}
F2 df_add(F2 x, float y) {
  const float s = x.x + y;
  return {s, ((x.x - s) + y) + x.y};
}

float sleef_logf_u10(float d) {
  const bool tiny = d < FLT_MIN;
  if (tiny) d = d * (static_cast<float>(INT64_C(1) << 32) * static_cast<float>(INT64_C(1) << 32));
  int e = static_cast<int>((float_bits(d * (1.0f / 0.75f)) >> 23) & 0xff) - 0x7f;
  const float m = bits_float(float_bits(d) + (static_cast<uint32_t>(-e) << 23));
  if (tiny) e -= 64;
  F2 s = df_mul(F2{0.69314718246459960938f, -1.904654323148236017e-09f}, static_cast<float>(e));
  const F2 x = df_div(df_add2(-1.0f, m), df_add2(1.0f, m));
  const float x2 = x.x * x.x;
  float t = 0.3027294874f;
  t = std::fmaf(t, x2, 0.3996108174f);
  t = std::fmaf(t, x2, 0.6666694880f);
  s = df_add(s, F2{x.x * 2.0f, x.y * 2.0f});
  s = df_add(s, (x2 * x.x) * t);
  float r = s.x + s.y;
  if (std::isinf(d) && d > 0) r = std::numeric_limits<float>::infinity();
  if (d < 0 || std::isnan(d)) r = std::numeric_limits<float>::quiet_NaN();
  if (d == 0) r = -std::numeric_limits<float>::infinity();
  return r;
}

// Python's int(round(x)) for the values get_params makes (half to even).
int64_t py_round(double x) { return static_cast<int64_t>(std::nearbyint(x)); }

}  // namespace

float torch_log_float(float x) { return sleef_logf_u10(x); }
float torch_exp_float(float x) { return sleef_expf_u10(x); }

float uniform_float(double from, double to, Generator& g) {
  return torch_uniform(g.random(), static_cast<float>(from), static_cast<float>(to));
}

bool random_flip_draw(double p, Generator& g) {
  return uniform_float(0.0, 1.0, g) < static_cast<float>(p);
}

CropBox random_resized_crop_params(int64_t height, int64_t width, const std::array<double, 2>& scale,
                                   const std::array<double, 2>& ratio, Generator& g) {
  const double area = static_cast<double>(height * width);
  const float log_lo = sleef_logf_u10(static_cast<float>(ratio[0]));
  const float log_hi = sleef_logf_u10(static_cast<float>(ratio[1]));
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target_area = area * static_cast<double>(uniform_float(scale[0], scale[1], g));
    const double aspect = static_cast<double>(sleef_expf_u10(uniform_float(log_lo, log_hi, g)));
    const int64_t w = py_round(std::sqrt(target_area * aspect));
    const int64_t h = py_round(std::sqrt(target_area / aspect));
    if (0 < w && w <= width && 0 < h && h <= height) {
      const int64_t i = g.randint(height - h + 1);
      const int64_t j = g.randint(width - w + 1);
      return {i, j, h, w};
    }
  }
  // Fallback to the central crop.
  const double in_ratio = static_cast<double>(width) / static_cast<double>(height);
  const double lo = std::min(ratio[0], ratio[1]), hi = std::max(ratio[0], ratio[1]);
  int64_t w, h;
  if (in_ratio < lo) {
    w = width;
    h = py_round(static_cast<double>(w) / lo);
  } else if (in_ratio > hi) {
    h = height;
    w = py_round(static_cast<double>(h) * hi);
  } else {
    w = width;
    h = height;
  }
  auto floordiv2 = [](int64_t v) { return v >= 0 ? v / 2 : -((-v + 1) / 2); };
  return {floordiv2(height - h), floordiv2(width - w), h, w};
}

// ------------------------------------------------------------------ Pillow's resampling
namespace {

constexpr int kPrecisionBits = 32 - 8 - 2;

inline uint8_t clip8(int32_t v) {
  const int32_t s = v >> kPrecisionBits;
  return static_cast<uint8_t>(s < 0 ? 0 : s > 255 ? 255 : s);
}

// One axis of a resample: the source pixels [lo, lo + size) may be used (Pillow clamps the
// filter to the cropped image); the box [in0, in1) (relative to lo) maps onto out_size
// outputs, of which [out_begin, out_end) are computed.
struct Axis {
  int64_t lo = 0;
  int64_t size = 0;
  double in0 = 0, in1 = 0;
  int64_t out_size = 0;
  int64_t out_begin = 0, out_end = 0;
  bool identity() const noexcept {
    return in0 == 0.0 && in1 == static_cast<double>(size) && out_size == size;
  }
};

// Pillow's precompute_coeffs + normalize_coeffs_8bpc for the outputs asked for.
struct Coeffs {
  int ksize = 0;
  std::vector<int32_t> first;  // per output: first source pixel (relative to Axis::lo)
  std::vector<int32_t> count;  // per output: taps used
  std::vector<int32_t> k;      // per output: ksize fixed-point weights
  bool uniform = false;        // every count is ksize
};

Coeffs precompute(const Axis& a) {
  Coeffs c;
  const double scale = (a.in1 - a.in0) / static_cast<double>(a.out_size);
  const double filterscale = scale < 1.0 ? 1.0 : scale;
  const double support = 1.0 * filterscale;  // bilinear: support 1
  c.ksize = static_cast<int>(std::ceil(support)) * 2 + 1;
  const int64_t n = a.out_end - a.out_begin;
  c.first.resize(static_cast<size_t>(n));
  c.count.resize(static_cast<size_t>(n));
  c.k.assign(static_cast<size_t>(n * c.ksize), 0);
  std::vector<double> kd(static_cast<size_t>(c.ksize));
  for (int64_t o = 0; o < n; ++o) {
    const int64_t xx = a.out_begin + o;
    const double center = a.in0 + (static_cast<double>(xx) + 0.5) * scale;
    double ww = 0.0;
    const double ss = 1.0 / filterscale;
    int64_t xmin = static_cast<int64_t>(center - support + 0.5);
    if (xmin < 0) xmin = 0;
    int64_t xmax = static_cast<int64_t>(center + support + 0.5);
    if (xmax > a.size) xmax = a.size;
    xmax -= xmin;
    if (xmax > c.ksize) xmax = c.ksize;  // cannot happen with Pillow's ksize; kept as a guard
    if (xmax < 0) xmax = 0;
    for (int64_t x = 0; x < xmax; ++x) {
      double arg = (static_cast<double>(x + xmin) - center + 0.5) * ss;
      if (arg < 0.0) arg = -arg;
      const double w = arg < 1.0 ? 1.0 - arg : 0.0;
      kd[static_cast<size_t>(x)] = w;
      ww += w;
    }
    for (int64_t x = 0; x < xmax; ++x)
      if (ww != 0.0) kd[static_cast<size_t>(x)] /= ww;
    int32_t* k = &c.k[static_cast<size_t>(o * c.ksize)];
    for (int64_t x = 0; x < xmax; ++x) {
      const double v = kd[static_cast<size_t>(x)];
      k[x] = v < 0 ? static_cast<int32_t>(-0.5 + v * (1 << kPrecisionBits))
                   : static_cast<int32_t>(0.5 + v * (1 << kPrecisionBits));
    }
    c.first[static_cast<size_t>(o)] = static_cast<int32_t>(xmin);
    c.count[static_cast<size_t>(o)] = static_cast<int32_t>(xmax);
  }
  // Every output with ksize taps (zero weights added; integer sums are exact, so nothing
  // changes): the passes then run a loop of fixed length.  Near the far edge the window
  // moves back so that it stays inside the source.
  if (a.size >= c.ksize) {
    for (int64_t o = 0; o < n; ++o) {
      int32_t& first = c.first[static_cast<size_t>(o)];
      int32_t& count = c.count[static_cast<size_t>(o)];
      int32_t* k = &c.k[static_cast<size_t>(o * c.ksize)];
      const int32_t shift = std::max<int32_t>(0, first + c.ksize - static_cast<int32_t>(a.size));
      if (shift > 0) {
        for (int j = c.ksize - 1; j >= 0; --j) k[j] = j >= shift ? k[j - shift] : 0;
        first -= shift;
      }
      count = c.ksize;
    }
    c.uniform = true;
  }
  return c;
}

// Horizontal pass: rows [0, rows) of `src` (row stride in bytes), outputs of `c` in each.
// K > 0: every output has K taps (Coeffs::uniform), a loop the compiler unrolls.
template <int C, int K>
void horizontal_k(const uint8_t* src, int64_t src_stride, int64_t rows, const Coeffs& c, uint8_t* dst,
                  int64_t dst_stride) {
  const int64_t n = static_cast<int64_t>(c.first.size());
  const int ksize = c.ksize;
  for (int64_t y = 0; y < rows; ++y) {
    const uint8_t* in = src + y * src_stride;
    uint8_t* out = dst + y * dst_stride;
    for (int64_t o = 0; o < n; ++o) {
      const int32_t* __restrict k = &c.k[static_cast<size_t>(o * ksize)];
      const uint8_t* __restrict p = in + static_cast<int64_t>(c.first[static_cast<size_t>(o)]) * C;
      const int cnt = K > 0 ? K : c.count[static_cast<size_t>(o)];
      if constexpr (C == 3) {
        int32_t s0 = 1 << (kPrecisionBits - 1), s1 = s0, s2 = s0;
        for (int x = 0; x < cnt; ++x) {
          const int32_t w = k[x];
          s0 += static_cast<int32_t>(p[3 * x]) * w;
          s1 += static_cast<int32_t>(p[3 * x + 1]) * w;
          s2 += static_cast<int32_t>(p[3 * x + 2]) * w;
        }
        out[o * 3] = clip8(s0);
        out[o * 3 + 1] = clip8(s1);
        out[o * 3 + 2] = clip8(s2);
      } else {
        int32_t s0 = 1 << (kPrecisionBits - 1);
        for (int x = 0; x < cnt; ++x) s0 += static_cast<int32_t>(p[x]) * k[x];
        out[o] = clip8(s0);
      }
    }
  }
}

#ifdef LOADER_RESAMPLE_AVX2
// AVX2 forms of the passes (runtime dispatch; the scalar ones stay the fallback).  The
// same integer sums as Pillow's (exact in any order: no overflow in 32 bits), the same
// rounding and clipping (arithmetic shift, then packs / packus saturate to 0..255).
bool have_avx2() {
  static const bool yes = __builtin_cpu_supports("avx2");
  return yes;
}
// set_resample_avx2(false) clears it (tests run both paths in one process).
std::atomic<bool> avx2_allowed{true};
bool use_avx2() { return avx2_allowed.load(std::memory_order_relaxed) && have_avx2(); }

// RGB, every output with c.ksize taps: two taps per step, 8 bytes loaded (pixels x, x+1
// and 2 bytes of x+2) into 8 int32 lanes [r0 g0 b0 r1 g1 b1 . .] times [k0 k0 k0 k1 k1 k1
// 0 0]; two rows at a time (independent sums to overlap, one coefficient load for both).
// `end`: the end of the source buffer; an output whose loads would pass it (the last
// pixels of the buffer's last row) takes the scalar loop.
inline void horizontal3_scalar_px(const uint8_t* p, const int32_t* k, int ksize, uint8_t* out) {
  int32_t s0 = 1 << (kPrecisionBits - 1), s1 = s0, s2 = s0;
  for (int x = 0; x < ksize; ++x) {
    s0 += static_cast<int32_t>(p[3 * x]) * k[x];
    s1 += static_cast<int32_t>(p[3 * x + 1]) * k[x];
    s2 += static_cast<int32_t>(p[3 * x + 2]) * k[x];
  }
  out[0] = clip8(s0);
  out[1] = clip8(s1);
  out[2] = clip8(s2);
}

template <int P>
__attribute__((target("avx2"), always_inline)) inline __m256i h3_sum(const uint8_t* p, const __m256i* v,
                                                                     __m256i acc) {
  for (int j = 0; j < P; ++j) {
    const __m256i px = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 6 * j)));
    acc = _mm256_add_epi32(acc, _mm256_mullo_epi32(px, _mm256_loadu_si256(v + j)));
  }
  return acc;
}

__attribute__((target("avx2"), always_inline)) inline __m256i h3_sum_n(const uint8_t* p, const __m256i* v,
                                                                       __m256i acc, int pairs) {
  for (int j = 0; j < pairs; ++j) {
    const __m256i px = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 6 * j)));
    acc = _mm256_add_epi32(acc, _mm256_mullo_epi32(px, _mm256_loadu_si256(v + j)));
  }
  return acc;
}

// Lanes 0..2: the sums of both taps' r, g, b, shifted (not yet clipped).
__attribute__((target("avx2"), always_inline)) inline __m128i h3_finish(__m256i acc, __m256i fold) {
  acc = _mm256_add_epi32(acc, _mm256_permutevar8x32_epi32(acc, fold));
  return _mm_srai_epi32(_mm256_castsi256_si128(acc), kPrecisionBits);
}

#define LOADER_AVX2_LAMBDA __attribute__((target("avx2"), always_inline))

template <int P>
__attribute__((target("avx2"))) void horizontal3_avx2_p(const uint8_t* src, int64_t src_stride, int64_t rows,
                                                        const Coeffs& c, uint8_t* dst, int64_t dst_stride,
                                                        const uint8_t* end, const int32_t* kv) {
  const int64_t n = static_cast<int64_t>(c.first.size());
  const int ksize = c.ksize;
  const int pairs = P > 0 ? P : (ksize + 1) / 2;
  const int64_t reach = int64_t{6} * (pairs - 1) + 8;  // bytes read from an output's first pixel
  const __m256i fold = _mm256_setr_epi32(3, 4, 5, 6, 6, 6, 6, 6);
  const __m256i round = _mm256_setr_epi32(1 << (kPrecisionBits - 1), 1 << (kPrecisionBits - 1),
                                          1 << (kPrecisionBits - 1), 0, 0, 0, 0, 0);
  const auto sum = [=](const uint8_t* p, const __m256i* v) LOADER_AVX2_LAMBDA {
    return P > 0 ? h3_sum<P>(p, v, round) : h3_sum_n(p, v, round, pairs);
  };
  const auto finish = [=](__m256i acc) LOADER_AVX2_LAMBDA { return h3_finish(acc, fold); };
  int64_t y = 0;
  for (; y + 2 <= rows; y += 2) {
    const uint8_t* in0 = src + y * src_stride;
    const uint8_t* in1 = in0 + src_stride;
    uint8_t* out0 = dst + y * dst_stride;
    uint8_t* out1 = out0 + dst_stride;
    // Outputs [0, safe) load inside the buffer (first[] never decreases); the row's last
    // output and any past `safe` take the scalar loop.
    int64_t safe = n - 1;
    while (safe > 0 && end - (in1 + static_cast<int64_t>(c.first[static_cast<size_t>(safe - 1)]) * 3) < reach) --safe;
    for (int64_t o = 0; o < n; ++o) {
      const int64_t off = static_cast<int64_t>(c.first[static_cast<size_t>(o)]) * 3;
      if (o >= safe) {
        const int32_t* k = &c.k[static_cast<size_t>(o * ksize)];
        horizontal3_scalar_px(in0 + off, k, ksize, out0 + o * 3);
        horizontal3_scalar_px(in1 + off, k, ksize, out1 + o * 3);
        continue;
      }
      const auto* v = reinterpret_cast<const __m256i*>(kv + o * pairs * 8);
      const __m128i s0 = finish(sum(in0 + off, v));
      const __m128i s1 = finish(sum(in1 + off, v));
      // [r g b . r' g' b' .] as bytes; the 4th byte of each store is the next output's
      // first, written after (the last output of a row takes the scalar loop above).
      const __m128i b = _mm_packus_epi16(_mm_packs_epi32(s0, s1), s0);
      const uint32_t w0 = static_cast<uint32_t>(_mm_cvtsi128_si32(b));
      const uint32_t w1 = static_cast<uint32_t>(_mm_extract_epi32(b, 1));
      std::memcpy(out0 + o * 3, &w0, 4);
      std::memcpy(out1 + o * 3, &w1, 4);
    }
  }
  for (; y < rows; ++y) {
    const uint8_t* in = src + y * src_stride;
    uint8_t* out = dst + y * dst_stride;
    for (int64_t o = 0; o < n; ++o) {
      const int64_t off = static_cast<int64_t>(c.first[static_cast<size_t>(o)]) * 3;
      if (end - (in + off) < reach || o == n - 1) {
        horizontal3_scalar_px(in + off, &c.k[static_cast<size_t>(o * ksize)], ksize, out + o * 3);
        continue;
      }
      const __m128i s = finish(sum(in + off, reinterpret_cast<const __m256i*>(kv + o * pairs * 8)));
      const __m128i b = _mm_packus_epi16(_mm_packs_epi32(s, s), s);
      const uint32_t w = static_cast<uint32_t>(_mm_cvtsi128_si32(b));
      std::memcpy(out + o * 3, &w, 4);
    }
  }
}

void horizontal3_avx2(const uint8_t* src, int64_t src_stride, int64_t rows, const Coeffs& c, uint8_t* dst,
                      int64_t dst_stride, const uint8_t* end) {
  const int64_t n = static_cast<int64_t>(c.first.size());
  const int ksize = c.ksize;
  const int pairs = (ksize + 1) / 2;
  std::vector<int32_t> kv(static_cast<size_t>(n * pairs * 8));
  for (int64_t o = 0; o < n; ++o) {
    const int32_t* k = &c.k[static_cast<size_t>(o * ksize)];
    int32_t* v = &kv[static_cast<size_t>(o * pairs * 8)];
    for (int j = 0; j < pairs; ++j) {
      const int32_t a = k[2 * j], b = 2 * j + 1 < ksize ? k[2 * j + 1] : 0;
      const int32_t lane[8] = {a, a, a, b, b, b, 0, 0};
      std::memcpy(v + j * 8, lane, sizeof lane);
    }
  }
  switch (pairs) {
    case 2: return horizontal3_avx2_p<2>(src, src_stride, rows, c, dst, dst_stride, end, kv.data());
    case 3: return horizontal3_avx2_p<3>(src, src_stride, rows, c, dst, dst_stride, end, kv.data());
    case 4: return horizontal3_avx2_p<4>(src, src_stride, rows, c, dst, dst_stride, end, kv.data());
    case 5: return horizontal3_avx2_p<5>(src, src_stride, rows, c, dst, dst_stride, end, kv.data());
    default: return horizontal3_avx2_p<0>(src, src_stride, rows, c, dst, dst_stride, end, kv.data());
  }
}

// Vertical pass over `len` bytes per row (any channel count: the same weight for a whole
// row), 16 bytes per step.
__attribute__((target("avx2"))) void vertical_avx2(const uint8_t* src, int64_t src_stride, int64_t len,
                                                   const Coeffs& c, uint8_t* dst, int64_t dst_stride) {
  const int64_t n = static_cast<int64_t>(c.first.size());
  const __m256i round = _mm256_set1_epi32(1 << (kPrecisionBits - 1));
  for (int64_t o = 0; o < n; ++o) {
    const int32_t* k = &c.k[static_cast<size_t>(o * c.ksize)];
    const uint8_t* base = src + static_cast<int64_t>(c.first[static_cast<size_t>(o)]) * src_stride;
    const int cnt = c.count[static_cast<size_t>(o)];
    uint8_t* out = dst + o * dst_stride;
    int64_t i = 0;
    for (; i + 32 <= len; i += 32) {
      __m256i a0 = round, a1 = round, a2 = round, a3 = round;
      const uint8_t* row = base + i;
      for (int y = 0; y < cnt; ++y, row += src_stride) {
        const __m256i w = _mm256_set1_epi32(k[y]);
        // 8-byte loads: each folds into its vpmovzxbd.
        const auto* r8 = reinterpret_cast<const __m128i*>(row);
        a0 = _mm256_add_epi32(a0, _mm256_mullo_epi32(_mm256_cvtepu8_epi32(_mm_loadl_epi64(r8)), w));
        a1 = _mm256_add_epi32(a1, _mm256_mullo_epi32(_mm256_cvtepu8_epi32(_mm_loadl_epi64(
                                                         reinterpret_cast<const __m128i*>(row + 8))), w));
        a2 = _mm256_add_epi32(a2, _mm256_mullo_epi32(_mm256_cvtepu8_epi32(_mm_loadl_epi64(
                                                         reinterpret_cast<const __m128i*>(row + 16))), w));
        a3 = _mm256_add_epi32(a3, _mm256_mullo_epi32(_mm256_cvtepu8_epi32(_mm_loadl_epi64(
                                                         reinterpret_cast<const __m128i*>(row + 24))), w));
      }
      a0 = _mm256_srai_epi32(a0, kPrecisionBits);
      a1 = _mm256_srai_epi32(a1, kPrecisionBits);
      a2 = _mm256_srai_epi32(a2, kPrecisionBits);
      a3 = _mm256_srai_epi32(a3, kPrecisionBits);
      // packs / packus work within 128-bit lanes: [a0l a1l a0h a1h] -> reorder the 64-bit
      // quarters after each.
      const __m256i p01 = _mm256_permute4x64_epi64(_mm256_packs_epi32(a0, a1), 0xD8);
      const __m256i p23 = _mm256_permute4x64_epi64(_mm256_packs_epi32(a2, a3), 0xD8);
      const __m256i b = _mm256_permute4x64_epi64(_mm256_packus_epi16(p01, p23), 0xD8);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), b);
    }
    for (; i < len; ++i) {
      int32_t s = 1 << (kPrecisionBits - 1);
      const uint8_t* row = base + i;
      for (int y = 0; y < cnt; ++y) s += static_cast<int32_t>(row[y * src_stride]) * k[y];
      out[i] = clip8(s);
    }
  }
}
#endif

template <int C>
void horizontal(const uint8_t* src, int64_t src_stride, int64_t rows, const Coeffs& c, uint8_t* dst,
                int64_t dst_stride, const uint8_t* src_end) {
#ifdef LOADER_RESAMPLE_AVX2
  if (C == 3 && c.uniform && use_avx2())
    return horizontal3_avx2(src, src_stride, rows, c, dst, dst_stride, src_end);
#else
  (void)src_end;
#endif
  if (c.uniform) {
    switch (c.ksize) {
      case 3: return horizontal_k<C, 3>(src, src_stride, rows, c, dst, dst_stride);
      case 5: return horizontal_k<C, 5>(src, src_stride, rows, c, dst, dst_stride);
      case 7: return horizontal_k<C, 7>(src, src_stride, rows, c, dst, dst_stride);
      case 9: return horizontal_k<C, 9>(src, src_stride, rows, c, dst, dst_stride);
      default: break;
    }
  }
  horizontal_k<C, 0>(src, src_stride, rows, c, dst, dst_stride);
}

// Vertical pass: each output row of `c` from the rows of `src` (row 0 = source row
// c.first's origin), `width` pixels per row.
template <int C>
void vertical(const uint8_t* src, int64_t src_stride, int64_t width, const Coeffs& c, uint8_t* dst,
              int64_t dst_stride) {
#ifdef LOADER_RESAMPLE_AVX2
  if (use_avx2()) return vertical_avx2(src, src_stride, width * C, c, dst, dst_stride);
#endif
  const int64_t n = static_cast<int64_t>(c.first.size());
  std::vector<int32_t> acc(static_cast<size_t>(width * C));
  for (int64_t o = 0; o < n; ++o) {
    const int32_t* k = &c.k[static_cast<size_t>(o * c.ksize)];
    const uint8_t* base = src + static_cast<int64_t>(c.first[static_cast<size_t>(o)]) * src_stride;
    const int cnt = c.count[static_cast<size_t>(o)];
    std::fill(acc.begin(), acc.end(), 1 << (kPrecisionBits - 1));
    for (int y = 0; y < cnt; ++y) {
      const uint8_t* row = base + y * src_stride;
      const int32_t w = k[y];
      for (int64_t i = 0; i < width * C; ++i) acc[static_cast<size_t>(i)] += static_cast<int32_t>(row[i]) * w;
    }
    uint8_t* out = dst + o * dst_stride;
    for (int64_t i = 0; i < width * C; ++i) out[i] = clip8(acc[static_cast<size_t>(i)]);
  }
}

// Pillow's ImagingResampleInner restricted to the outputs [ax.out_begin, ax.out_end) x
// [ay.out_begin, ay.out_end): horizontal pass first (only over the source rows the wanted
// output rows use), into uint8, then the vertical pass.
template <int C>
Image resample_t(const Image& src, const Axis& ax, const Axis& ay) {
  const int64_t out_w = ax.out_end - ax.out_begin;
  const int64_t out_h = ay.out_end - ay.out_begin;
  Image out(out_h, out_w, C);
  if (out_w <= 0 || out_h <= 0) return out;
  const int64_t src_stride = src.width * C;
  const bool need_h = !ax.identity();
  const bool need_v = !ay.identity();
  const Coeffs cy = need_v ? precompute(ay) : Coeffs{};
  // Source rows used (relative to ay.lo).
  int64_t row_first, row_last;
  if (need_v) {
    row_first = std::numeric_limits<int64_t>::max();
    row_last = 0;
    for (size_t o = 0; o < cy.first.size(); ++o) {
      row_first = std::min<int64_t>(row_first, cy.first[o]);
      row_last = std::max<int64_t>(row_last, int64_t{cy.first[o]} + cy.count[o]);
    }
    if (row_first > row_last) row_first = row_last;
  } else {
    row_first = ay.out_begin;
    row_last = ay.out_end;
  }
  const uint8_t* src0 = src.data() + (ay.lo + row_first) * src_stride + ax.lo * C;
  const uint8_t* src_end = src.data() + src.height * src_stride;
  const uint8_t* mid = nullptr;
  int64_t mid_stride = 0;
  Image tmp;
  if (need_h) {
    const Coeffs cx = precompute(ax);
    if (!need_v) {
      horizontal<C>(src0, src_stride, out_h, cx, out.data(), out_w * C, src_end);
      return out;
    }
    tmp = Image(row_last - row_first, out_w, C);
    horizontal<C>(src0, src_stride, row_last - row_first, cx, tmp.data(), out_w * C, src_end);
    mid = tmp.data();
    mid_stride = out_w * C;
  } else {
    mid = src0 + ax.out_begin * C;  // identity: output column x is source column x
    mid_stride = src_stride;
  }
  if (!need_v) {
    for (int64_t y = 0; y < out_h; ++y) std::memcpy(out.data() + y * out_w * C, mid + y * mid_stride, static_cast<size_t>(out_w * C));
    return out;
  }
  // The vertical coefficients count rows from ay.lo; mid starts at row_first.
  Coeffs shifted = cy;
  for (auto& f : shifted.first) f = static_cast<int32_t>(f - row_first);
  vertical<C>(mid, mid_stride, out_w, shifted, out.data(), out_w * C);
  return out;
}

Image resample(const Image& src, const Axis& ax, const Axis& ay) {
  if (src.channels == 3) return resample_t<3>(src, ax, ay);
  if (src.channels == 1) return resample_t<1>(src, ax, ay);
  throw ValueError("resample: images of " + std::to_string(src.channels) + " channels are not supported (1 or 3)");
}

Axis exact_axis(int64_t start, int64_t length, int64_t out_size, int64_t out_begin, int64_t out_end) {
  Axis a;
  a.lo = start;
  a.size = length;
  a.in0 = 0.0;
  a.in1 = static_cast<double>(length);
  a.out_size = out_size;
  a.out_begin = out_begin;
  a.out_end = out_end;
  return a;
}

}  // namespace

Image resize_bilinear(const Image& image, const CropBox& box, int64_t out_height, int64_t out_width) {
  if (box.top < 0 || box.left < 0 || box.height <= 0 || box.width <= 0 || box.top + box.height > image.height ||
      box.left + box.width > image.width)
    throw ValueError("resize_bilinear: the box (top " + std::to_string(box.top) + ", left " + std::to_string(box.left) +
                     ", " + std::to_string(box.height) + "x" + std::to_string(box.width) + ") is not inside the " +
                     std::to_string(image.height) + "x" + std::to_string(image.width) + " image");
  if (out_height <= 0 || out_width <= 0)
    throw ValueError("resize_bilinear: the output size must be positive, got " + std::to_string(out_height) + "x" +
                     std::to_string(out_width));
  return resample(image, exact_axis(box.left, box.width, out_width, 0, out_width),
                  exact_axis(box.top, box.height, out_height, 0, out_height));
}

void set_resample_avx2(bool allowed) noexcept {
#ifdef LOADER_RESAMPLE_AVX2
  avx2_allowed.store(allowed, std::memory_order_relaxed);
#else
  (void)allowed;
#endif
}

bool resample_avx2() noexcept {
#ifdef LOADER_RESAMPLE_AVX2
  return use_avx2();
#else
  return false;
#endif
}

// ------------------------------------------------------------------ TransformStep
namespace {

std::string step_context(const TransformStep& s) { return std::string(s.name()); }

void check_positive_size(const TransformStep& s, int64_t h, int64_t w) {
  if (h <= 0 || w <= 0)
    throw ValueError(step_context(s) + ": size must be positive, got (" + std::to_string(h) + ", " + std::to_string(w) +
                     ")");
}

}  // namespace

TransformStep TransformStep::random_resized_crop(int64_t height, int64_t width, std::array<double, 2> scale,
                                                 std::array<double, 2> ratio) {
  TransformStep s;
  s.kind = Kind::RandomResizedCrop;
  s.size = {{height, width}};
  s.scale = scale;
  s.ratio = ratio;
  return s;
}
TransformStep TransformStep::resize(int64_t smaller_edge, int64_t max_size) {
  TransformStep s;
  s.kind = Kind::Resize;
  s.size = {{smaller_edge, -1}};
  s.max_size = max_size;
  return s;
}
TransformStep TransformStep::resize_to(int64_t height, int64_t width) {
  TransformStep s;
  s.kind = Kind::Resize;
  s.size = {{height, width}};
  return s;
}
TransformStep TransformStep::center_crop(int64_t height, int64_t width) {
  TransformStep s;
  s.kind = Kind::CenterCrop;
  s.size = {{height, width}};
  return s;
}
TransformStep TransformStep::random_horizontal_flip(double p) {
  TransformStep s;
  s.kind = Kind::RandomHorizontalFlip;
  s.p = p;
  return s;
}
TransformStep TransformStep::to_tensor() {
  TransformStep s;
  s.kind = Kind::ToTensor;
  return s;
}
TransformStep TransformStep::pil_to_tensor() {
  TransformStep s;
  s.kind = Kind::PILToTensor;
  return s;
}
TransformStep TransformStep::convert_image_dtype(DType dtype) {
  TransformStep s;
  s.kind = Kind::ConvertImageDtype;
  s.dtype = dtype;
  return s;
}
TransformStep TransformStep::normalize(std::vector<double> mean, std::vector<double> std_dev) {
  TransformStep s;
  s.kind = Kind::Normalize;
  s.mean = std::move(mean);
  s.std_dev = std::move(std_dev);
  return s;
}

const char* TransformStep::name() const noexcept {
  switch (kind) {
    case Kind::RandomResizedCrop: return "RandomResizedCrop";
    case Kind::Resize: return "Resize";
    case Kind::CenterCrop: return "CenterCrop";
    case Kind::RandomHorizontalFlip: return "RandomHorizontalFlip";
    case Kind::ToTensor: return "ToTensor";
    case Kind::PILToTensor: return "PILToTensor";
    case Kind::ConvertImageDtype: return "ConvertImageDtype";
    case Kind::Normalize: return "Normalize";
  }
  return "?";
}

namespace {

Value double_list(const std::vector<double>& v) {
  std::vector<Value> items;
  for (double d : v) items.emplace_back(d);
  return Value::list(std::move(items));
}
Value size_list(int64_t h, int64_t w) { return Value::list({Value(h), Value(w)}); }

const char* kStepNames = "RandomResizedCrop, Resize, CenterCrop, RandomHorizontalFlip, ToTensor, PILToTensor, "
                         "ConvertImageDtype, Normalize";

std::vector<double> number_list(const Value& v, const std::string& what) {
  std::vector<double> out;
  if (v.is_number()) {
    out.push_back(v.to_double());
    return out;
  }
  if (!v.is_sequence()) throw TypeError(what + " must be a number or a list of numbers, got " + v.python_type());
  for (const Value& x : v.items()) {
    if (!x.is_number()) throw TypeError(what + " must hold numbers, got " + x.python_type());
    out.push_back(x.to_double());
  }
  return out;
}

std::array<double, 2> pair_of(const Value& v, const std::string& what) {
  std::vector<double> d = number_list(v, what);
  if (d.size() != 2) throw ValueError(what + " must be a pair (min, max), got " + std::to_string(d.size()) + " values");
  return {{d[0], d[1]}};
}

// "size": an int, or [s], or [h, w].  Returns (h, w) with w = -1 for a single value.
std::array<int64_t, 2> size_of(const Value& v, const std::string& what) {
  if (v.is_int()) return {{v.to_int(), -1}};
  if (!v.is_sequence()) throw TypeError(what + " must be an int or a list [h, w], got " + v.python_type());
  const auto& items = v.items();
  if (items.size() == 1 && items[0].is_int()) return {{items[0].to_int(), -1}};
  if (items.size() == 2 && items[0].is_int() && items[1].is_int()) return {{items[0].to_int(), items[1].to_int()}};
  throw ValueError(what + " must be an int, [size] or [h, w] of ints, got " + v.repr());
}

}  // namespace

Value TransformStep::to_value() const {
  std::vector<std::pair<Value, Value>> d;
  d.emplace_back(Value("name"), Value(name()));
  switch (kind) {
    case Kind::RandomResizedCrop:
      d.emplace_back(Value("size"), size_list(size[0], size[1]));
      d.emplace_back(Value("scale"), double_list({scale[0], scale[1]}));
      d.emplace_back(Value("ratio"), double_list({ratio[0], ratio[1]}));
      break;
    case Kind::Resize:
      if (size[1] < 0) {
        d.emplace_back(Value("size"), Value(size[0]));
        if (max_size > 0) d.emplace_back(Value("max_size"), Value(max_size));
      } else {
        d.emplace_back(Value("size"), size_list(size[0], size[1]));
      }
      break;
    case Kind::CenterCrop: d.emplace_back(Value("size"), size_list(size[0], size[1])); break;
    case Kind::RandomHorizontalFlip: d.emplace_back(Value("p"), Value(p)); break;
    case Kind::ConvertImageDtype: d.emplace_back(Value("dtype"), Value(dtype_name(dtype))); break;
    case Kind::Normalize:
      d.emplace_back(Value("mean"), double_list(mean));
      d.emplace_back(Value("std"), double_list(std_dev));
      break;
    case Kind::ToTensor:
    case Kind::PILToTensor: break;
  }
  return Value::dict(std::move(d));
}

TransformStep TransformStep::from_value(const Value& v) {
  if (v.is_string()) {  // a step without arguments may be given by its name
    return from_value(Value::dict({{"name", v}}));
  }
  if (!v.is_dict()) throw TypeError("a transform step must be a dict {\"name\": ..., arguments}, got " + v.python_type());
  if (!v.contains("name") || !v.at("name").is_string())
    throw ValueError("a transform step needs \"name\" (one of " + std::string(kStepNames) + "), got " + v.repr());
  const std::string name = v.at("name").to_string();
  TransformStep s;
  std::vector<std::string> allowed;
  if (name == "RandomResizedCrop") {
    if (!v.contains("size")) throw ValueError("RandomResizedCrop needs \"size\"");
    auto sz = size_of(v.at("size"), "RandomResizedCrop size");
    s = random_resized_crop(sz[0], sz[1] < 0 ? sz[0] : sz[1]);
    if (v.contains("scale")) s.scale = pair_of(v.at("scale"), "RandomResizedCrop scale");
    if (v.contains("ratio")) s.ratio = pair_of(v.at("ratio"), "RandomResizedCrop ratio");
    allowed = {"size", "scale", "ratio"};
  } else if (name == "Resize") {
    if (!v.contains("size")) throw ValueError("Resize needs \"size\"");
    auto sz = size_of(v.at("size"), "Resize size");
    const Value ms = v.get("max_size", Value());
    if (sz[1] < 0) {
      s = resize(sz[0], ms.is_none() ? 0 : ms.to_int());
    } else {
      if (!ms.is_none())
        throw ValueError("Resize: max_size should only be passed if size specifies the length of the smaller edge, "
                         "i.e. size should be an int or a sequence of length 1");
      s = resize_to(sz[0], sz[1]);
    }
    allowed = {"size", "max_size"};
  } else if (name == "CenterCrop") {
    if (!v.contains("size")) throw ValueError("CenterCrop needs \"size\"");
    auto sz = size_of(v.at("size"), "CenterCrop size");
    s = center_crop(sz[0], sz[1] < 0 ? sz[0] : sz[1]);
    allowed = {"size"};
  } else if (name == "RandomHorizontalFlip") {
    s = random_horizontal_flip(v.contains("p") ? v.at("p").to_double() : 0.5);
    allowed = {"p"};
  } else if (name == "ToTensor") {
    s = to_tensor();
  } else if (name == "PILToTensor") {
    s = pil_to_tensor();
  } else if (name == "ConvertImageDtype") {
    DType dt = DType::Float32;
    if (v.contains("dtype")) {
      const std::string t = v.at("dtype").to_string();
      if (t != "float32" && t != "torch.float32" && t != "float")
        throw ValueError("ConvertImageDtype: dtype '" + t + "' is not supported; only float32 is");
    }
    s = convert_image_dtype(dt);
    allowed = {"dtype"};
  } else if (name == "Normalize") {
    if (!v.contains("mean") || !v.contains("std")) throw ValueError("Normalize needs \"mean\" and \"std\"");
    s = normalize(number_list(v.at("mean"), "Normalize mean"), number_list(v.at("std"), "Normalize std"));
    allowed = {"mean", "std"};
  } else {
    throw ValueError("unknown transform '" + name + "'; the transforms are " + kStepNames);
  }
  for (const auto& [key, value] : v.dict_items()) {
    (void)value;
    const std::string k = key.is_string() ? key.to_string() : key.repr();
    if (k == "name") continue;
    if (std::find(allowed.begin(), allowed.end(), k) == allowed.end()) {
      std::string list;
      for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
      throw ValueError("unknown argument '" + k + "' for " + name + (list.empty() ? " (it takes none)" : "; accepted: " + list));
    }
  }
  return s;
}

// ------------------------------------------------------------------ Compose
namespace {

bool is_geometric(TransformStep::Kind k) {
  using K = TransformStep::Kind;
  return k == K::RandomResizedCrop || k == K::Resize || k == K::CenterCrop || k == K::RandomHorizontalFlip;
}

// torchvision's _compute_resized_output_size: (height, width) after Resize for h x w.
std::array<int64_t, 2> resized_size(int64_t h, int64_t w, const TransformStep& s) {
  if (s.size[1] >= 0) return {{s.size[0], s.size[1]}};
  const bool w_short = w <= h;
  const int64_t shorter = w_short ? w : h, longer = w_short ? h : w;
  const int64_t req = s.size[0];
  int64_t new_short = req;
  int64_t new_long = static_cast<int64_t>(static_cast<double>(req * longer) / static_cast<double>(shorter));
  if (s.max_size > 0 && new_long > s.max_size) {
    new_short = static_cast<int64_t>(static_cast<double>(s.max_size * new_short) / static_cast<double>(new_long));
    new_long = s.max_size;
  }
  return w_short ? std::array<int64_t, 2>{{new_long, new_short}} : std::array<int64_t, 2>{{new_short, new_long}};
}

// torchvision's center_crop on an image of h x w: the box, in the image's coordinates
// (negative or past the edge where torchvision pads with zeros first).
CropBox center_crop_box(int64_t h, int64_t w, int64_t ch, int64_t cw) {
  int64_t pad_left = 0, pad_top = 0, ph = h, pw = w;
  if (cw > w || ch > h) {
    pad_left = cw > w ? (cw - w) / 2 : 0;
    pad_top = ch > h ? (ch - h) / 2 : 0;
    const int64_t pad_right = cw > w ? (cw - w + 1) / 2 : 0;
    const int64_t pad_bottom = ch > h ? (ch - h + 1) / 2 : 0;
    pw = w + pad_left + pad_right;
    ph = h + pad_top + pad_bottom;
    if (cw == pw && ch == ph) return {-pad_top, -pad_left, ch, cw};
  }
  const int64_t top = py_round(static_cast<double>(ph - ch) / 2.0);
  const int64_t left = py_round(static_cast<double>(pw - cw) / 2.0);
  return {top - pad_top, left - pad_left, ch, cw};
}

// One pass over an image: a region of the stage's input (zeros where it leaves the
// input), optionally resized, a window of that, optionally mirrored.
struct Stage {
  int64_t in_h = 0, in_w = 0;  // the stage's input
  CropBox region;
  bool resize = false;
  int64_t out_h = 0, out_w = 0;
  CropBox window;  // of the resized region (== the region's extent without resize)
  bool flip = false;
  bool region_inside() const noexcept {
    return region.top >= 0 && region.left >= 0 && region.top + region.height <= in_h &&
           region.left + region.width <= in_w;
  }
};

Stage fresh_stage(int64_t h, int64_t w) {
  Stage s;
  s.in_h = h;
  s.in_w = w;
  s.region = {0, 0, h, w};
  s.window = {0, 0, h, w};
  return s;
}

struct Planner {
  std::vector<Stage> stages;
  int64_t h() const { return stages.back().window.height; }
  int64_t w() const { return stages.back().window.width; }

  void crop(CropBox b) {
    // A box reaching past the current image reads zeros there (torchvision pads): it can be
    // folded into the stage only while the stage's output is its whole input (or its whole
    // resize); otherwise it would read pixels an earlier crop cut away.
    const bool inside = b.top >= 0 && b.left >= 0 && b.top + b.height <= h() && b.left + b.width <= w();
    if (!inside) {
      const Stage& c = stages.back();
      const bool whole = c.resize ? (c.window == CropBox{0, 0, c.out_h, c.out_w})
                                  : (c.region == CropBox{0, 0, c.in_h, c.in_w});
      if (!whole) stages.push_back(fresh_stage(h(), w()));
    }
    Stage& s = stages.back();
    if (s.flip) b.left = s.window.width - b.left - b.width;
    if (!s.resize) {
      s.region.top += b.top;
      s.region.left += b.left;
      s.region.height = b.height;
      s.region.width = b.width;
      s.window = {0, 0, b.height, b.width};
    } else {
      s.window.top += b.top;
      s.window.left += b.left;
      s.window.height = b.height;
      s.window.width = b.width;
    }
  }
  void resize(int64_t nh, int64_t nw) {
    if (nh == h() && nw == w()) return;  // torchvision (and Pillow) return the image as is
    Stage& s = stages.back();
    if (s.resize || s.flip || !s.region_inside()) stages.push_back(fresh_stage(h(), w()));
    Stage& t = stages.back();
    t.resize = true;
    t.out_h = nh;
    t.out_w = nw;
    t.window = {0, 0, nh, nw};
  }
  void flip() { stages.back().flip = !stages.back().flip; }
};

// Copies box (zeros outside src) of src into a new image, mirrored when flip.
Image materialize(const Image& src, const CropBox& box, bool flip) {
  const int64_t C = src.channels;
  Image out(box.height, box.width, C);
  for (int64_t y = 0; y < box.height; ++y) {
    uint8_t* d = out.data() + y * box.width * C;
    const int64_t sy = box.top + y;
    for (int64_t x = 0; x < box.width; ++x) {
      const int64_t sx = box.left + (flip ? box.width - 1 - x : x);
      if (sy < 0 || sy >= src.height || sx < 0 || sx >= src.width) {
        for (int64_t c = 0; c < C; ++c) d[x * C + c] = 0;
      } else {
        std::memcpy(d + x * C, src.data() + (sy * src.width + sx) * C, static_cast<size_t>(C));
      }
    }
  }
  return out;
}

// The resample of stage `s` from `src`, for the part of its window inside the resized
// image; `offset` receives the window's position in the returned image.
Image run_resize(const Image& src, const Stage& s, const Axis* scaled_x, const Axis* scaled_y, CropBox* in_result) {
  const int64_t x0 = std::max<int64_t>(0, s.window.left), x1 = std::min(s.out_w, s.window.left + s.window.width);
  const int64_t y0 = std::max<int64_t>(0, s.window.top), y1 = std::min(s.out_h, s.window.top + s.window.height);
  Axis ax = scaled_x ? *scaled_x : exact_axis(s.region.left, s.region.width, s.out_w, 0, 0);
  Axis ay = scaled_y ? *scaled_y : exact_axis(s.region.top, s.region.height, s.out_h, 0, 0);
  ax.out_begin = x0;
  ax.out_end = std::max(x0, x1);
  ay.out_begin = y0;
  ay.out_end = std::max(y0, y1);
  *in_result = {s.window.top - y0, s.window.left - x0, s.window.height, s.window.width};
  return resample(src, ax, ay);
}

}  // namespace

Compose::Compose(std::vector<TransformStep> steps) : steps_(std::move(steps)) {
  using K = TransformStep::Kind;
  bool tensor = false;  // a tensor step came
  DType dt = DType::UInt8;
  for (size_t i = 0; i < steps_.size(); ++i) {
    const TransformStep& s = steps_[i];
    const std::string where = std::string(s.name()) + " (step " + std::to_string(i) + ")";
    if (is_geometric(s.kind) && tensor)
      throw ValueError(where + " comes after a tensor conversion: put RandomResizedCrop, Resize, CenterCrop and "
                               "RandomHorizontalFlip before ToTensor / PILToTensor (torchvision's tensor path "
                               "resamples differently and is not reproduced)");
    switch (s.kind) {
      case K::RandomResizedCrop:
        check_positive_size(s, s.size[0], s.size[1]);
        if (s.scale[0] > s.scale[1] || s.ratio[0] > s.ratio[1])
          throw ValueError(where + ": scale and ratio should be of kind (min, max), got scale (" +
                           std::to_string(s.scale[0]) + ", " + std::to_string(s.scale[1]) + ") ratio (" +
                           std::to_string(s.ratio[0]) + ", " + std::to_string(s.ratio[1]) + ")");
        if (!(s.ratio[0] > 0) || !(s.scale[0] >= 0))
          throw ValueError(where + ": ratio must be > 0 and scale >= 0");
        break;
      case K::Resize:
        if (s.size[1] < 0) {
          check_positive_size(s, s.size[0], 1);
          if (s.max_size > 0 && s.max_size <= s.size[0])
            throw ValueError(where + ": max_size = " + std::to_string(s.max_size) +
                             " must be strictly greater than the requested size for the smaller edge size = " +
                             std::to_string(s.size[0]));
        } else {
          check_positive_size(s, s.size[0], s.size[1]);
        }
        break;
      case K::CenterCrop: check_positive_size(s, s.size[0], s.size[1]); break;
      case K::RandomHorizontalFlip: break;
      case K::ToTensor:
      case K::PILToTensor:
        if (tensor)
          throw ValueError(where + ": the image is a tensor already (pic should be PIL Image); use one of "
                                   "ToTensor / PILToTensor");
        tensor = true;
        dt = s.kind == K::ToTensor ? DType::Float32 : DType::UInt8;
        break;
      case K::ConvertImageDtype:
        if (!tensor) throw ValueError(where + " needs a tensor: put ToTensor or PILToTensor before it");
        if (s.dtype != DType::Float32)
          throw ValueError(where + ": dtype " + dtype_name(s.dtype) + " is not supported; only float32 is");
        dt = DType::Float32;
        break;
      case K::Normalize:
        if (!tensor) throw ValueError(where + " needs a tensor: put ToTensor before it");
        if (dt != DType::Float32)
          throw ValueError(where + ": Input tensor should be a float tensor. Got torch.uint8. (put "
                                   "ConvertImageDtype(float32) before it)");
        if ((s.mean.size() != 1 && s.mean.size() != 3) || (s.std_dev.size() != 1 && s.std_dev.size() != 3))
          throw ValueError(where + ": mean and std need 1 value or 3 (one per channel), got " +
                           std::to_string(s.mean.size()) + " and " + std::to_string(s.std_dev.size()));
        for (double sd : s.std_dev)
          if (static_cast<float>(sd) == 0.0f)
            throw ValueError(where + ": std evaluated to zero after conversion to torch.float32, leading to "
                                     "division by zero.");
        break;
    }
  }
  output_dtype_ = dt;
}

Compose Compose::preset(const std::string& name, int64_t size) {
  if (size <= 0) throw ValueError("transform preset '" + name + "': size must be positive, got " + std::to_string(size));
  const std::vector<double> mean{0.485, 0.456, 0.406}, sd{0.229, 0.224, 0.225};
  if (name == "none") return Compose();
  if (name == "train")
    return Compose({TransformStep::random_resized_crop(size), TransformStep::random_horizontal_flip(),
                    TransformStep::to_tensor(), TransformStep::normalize(mean, sd)});
  if (name == "eval") {
    // torchvision's references: Resize(int(size * 256 / 224)) (Python's float division).
    const auto resize = static_cast<int64_t>(static_cast<double>(size * 256) / 224.0);
    return Compose({TransformStep::resize(resize), TransformStep::center_crop(size), TransformStep::to_tensor(),
                    TransformStep::normalize(mean, sd)});
  }
  throw ValueError("unknown transform preset '" + name + "'; the presets are \"none\", \"train\" and \"eval\" (or "
                   "give a list of steps)");
}

Compose Compose::from_value(const Value& v, int64_t size) {
  if (v.is_none()) return Compose();
  if (v.is_string()) return preset(v.to_string(), size);
  if (!v.is_sequence())
    throw TypeError("transform must be a preset name (\"none\", \"train\", \"eval\") or a list of steps, got " +
                    v.python_type());
  std::vector<TransformStep> steps;
  for (size_t i = 0; i < v.items().size(); ++i) {
    try {
      steps.push_back(TransformStep::from_value(v.items()[i]));
    } catch (const Error& e) {
      throw_error(e.python_type(), "transform step " + std::to_string(i) + ": " + e.what());
    }
  }
  return Compose(std::move(steps));
}

Value Compose::to_value() const {
  std::vector<Value> items;
  for (const auto& s : steps_) items.push_back(s.to_value());
  return Value::list(std::move(items));
}

Dims Compose::output_shape(int64_t height, int64_t width, int64_t channels) const {
  using K = TransformStep::Kind;
  int64_t h = height, w = width;
  for (const auto& s : steps_) {
    if (s.kind == K::RandomResizedCrop || s.kind == K::CenterCrop) {
      h = s.size[0];
      w = s.size[1];
    } else if (s.kind == K::Resize) {
      auto r = resized_size(h, w, s);
      h = r[0];
      w = r[1];
    }
  }
  return Dims{channels, h, w};
}

std::optional<Dims> Compose::fixed_output_shape(int64_t channels) const {
  using K = TransformStep::Kind;
  std::optional<Dims> shape;
  for (const auto& s : steps_) {
    if (s.kind == K::RandomResizedCrop || s.kind == K::CenterCrop || (s.kind == K::Resize && s.size[1] >= 0))
      shape = Dims{channels, s.size[0], s.size[1]};
    else if (s.kind == K::Resize)
      shape.reset();
  }
  return shape;
}

namespace {

// The per-channel table of the tensor steps: uint8 value -> output value.
struct OutputTable {
  DType dtype = DType::UInt8;
  std::vector<float> lut;  // channels * 256 when float
};

OutputTable output_table(const std::vector<TransformStep>& steps, int64_t channels) {
  using K = TransformStep::Kind;
  OutputTable t;
  bool is_float = false;
  for (const auto& s : steps)
    if (s.kind == K::ToTensor || s.kind == K::ConvertImageDtype) is_float = true;
  if (!is_float) return t;
  t.dtype = DType::Float32;
  t.lut.resize(static_cast<size_t>(channels * 256));
  for (int64_t c = 0; c < channels; ++c) {
    for (int v = 0; v < 256; ++v) {
      float x = static_cast<float>(v);
      bool f = false;
      for (const auto& s : steps) {
        if (s.kind == K::ToTensor || (s.kind == K::ConvertImageDtype && !f)) {
          x = static_cast<float>(v) / 255.0f;  // torch: x.to(float32).div(255)
          f = true;
        } else if (s.kind == K::Normalize) {
          if (channels == 1 && (s.mean.size() == 3 || s.std_dev.size() == 3))
            throw ValueError("Normalize: 3 mean/std values for a 1-channel (mode L) image: give one value each");
          const float m = static_cast<float>(s.mean[static_cast<size_t>(c) % s.mean.size()]);
          const float d = static_cast<float>(s.std_dev[static_cast<size_t>(c) % s.std_dev.size()]);
          x = (x - m) / d;
        }
      }
      t.lut[static_cast<size_t>(c * 256 + v)] = x;
    }
  }
  return t;
}

// Writes box (zeros outside src) of src, mirrored when flip, as CHW of the table's dtype.
template <int C>
void write_chw(const Image& src, const CropBox& box, bool flip, const OutputTable& t, void* dst) {
  const int64_t H = box.height, W = box.width, plane = H * W;
  const bool inside = box.top >= 0 && box.left >= 0 && box.top + H <= src.height && box.left + W <= src.width;
  const bool fl = t.dtype == DType::Float32;
  auto* df = static_cast<float*>(dst);
  auto* du = static_cast<uint8_t*>(dst);
  const float* lut = t.lut.data();
  for (int64_t y = 0; y < H; ++y) {
    const int64_t sy = box.top + y;
    if (inside) {
      const uint8_t* row = src.data() + (sy * src.width + box.left) * C;
      if (fl) {
        for (int64_t x = 0; x < W; ++x) {
          const uint8_t* p = row + (flip ? W - 1 - x : x) * C;
          for (int c = 0; c < C; ++c) df[c * plane + y * W + x] = lut[c * 256 + p[c]];
        }
      } else {
        for (int64_t x = 0; x < W; ++x) {
          const uint8_t* p = row + (flip ? W - 1 - x : x) * C;
          for (int c = 0; c < C; ++c) du[c * plane + y * W + x] = p[c];
        }
      }
      continue;
    }
    for (int64_t x = 0; x < W; ++x) {
      const int64_t sx = box.left + (flip ? W - 1 - x : x);
      const bool in = sy >= 0 && sy < src.height && sx >= 0 && sx < src.width;
      for (int c = 0; c < C; ++c) {
        const uint8_t v = in ? src.data()[(sy * src.width + sx) * C + c] : 0;
        if (fl)
          df[c * plane + y * W + x] = lut[c * 256 + v];
        else
          du[c * plane + y * W + x] = v;
      }
    }
  }
}

void write_output(const Image& src, const CropBox& box, bool flip, const OutputTable& t, void* dst) {
  if (src.channels == 3)
    write_chw<3>(src, box, flip, t, dst);
  else if (src.channels == 1)
    write_chw<1>(src, box, flip, t, dst);
  else
    throw ValueError("images of " + std::to_string(src.channels) + " channels are not supported (1 or 3)");
}

// The pipeline's geometric steps planned for an image of h x w (the draws happen here).
std::vector<Stage> plan(const std::vector<TransformStep>& steps, int64_t h, int64_t w, Generator& g, Trace* trace) {
  using K = TransformStep::Kind;
  Planner p;
  p.stages.push_back(fresh_stage(h, w));
  for (const auto& s : steps) {
    switch (s.kind) {
      case K::RandomResizedCrop: {
        const CropBox b = random_resized_crop_params(p.h(), p.w(), s.scale, s.ratio, g);
        if (trace) trace->crops.push_back(b);
        p.crop(b);
        p.resize(s.size[0], s.size[1]);
        break;
      }
      case K::Resize: {
        const auto r = resized_size(p.h(), p.w(), s);
        p.resize(r[0], r[1]);
        break;
      }
      case K::CenterCrop: p.crop(center_crop_box(p.h(), p.w(), s.size[0], s.size[1])); break;
      case K::RandomHorizontalFlip: {
        const bool f = random_flip_draw(s.p, g);
        if (trace) trace->flips.push_back(f);
        if (f) p.flip();
        break;
      }
      default: break;
    }
  }
  return p.stages;
}

// Runs the planned stages on `img` and writes the result.  `first_x/first_y`: the scaled
// axes of stage 0 (decode_scaling), or null.
void execute(const Image& img, const std::vector<Stage>& stages, const OutputTable& table, void* dst,
             const Axis* first_x, const Axis* first_y) {
  Image cur = img;
  for (size_t i = 0; i < stages.size(); ++i) {
    const Stage& s = stages[i];
    const bool last = i + 1 == stages.size();
    const Axis* sx = i == 0 ? first_x : nullptr;
    const Axis* sy = i == 0 ? first_y : nullptr;
    if (!s.resize) {
      if (last) {
        write_output(cur, s.region, s.flip, table, dst);
        return;
      }
      cur = materialize(cur, s.region, s.flip);
      continue;
    }
    CropBox box;
    Image resized = run_resize(cur, s, sx, sy, &box);
    if (last) {
      write_output(resized, box, s.flip, table, dst);
      return;
    }
    const bool whole = box.top == 0 && box.left == 0 && box.height == resized.height && box.width == resized.width;
    cur = (whole && !s.flip) ? std::move(resized) : materialize(resized, box, s.flip);
  }
}

Tensor empty_output(const Dims& shape, DType dtype) { return Tensor::empty(shape, dtype); }

}  // namespace

Tensor Compose::operator()(const Image& image, Generator& g, Trace* trace) const {
  const Dims shape = output_shape(image.height, image.width, image.channels);
  Tensor out = empty_output(shape, output_dtype_);
  apply_into(image, g, out.data_ptr(), trace);
  return out;
}

void Compose::apply_into(const Image& image, Generator& g, void* dst, Trace* trace) const {
  if (image.channels != 1 && image.channels != 3)
    throw ValueError("Compose: images of " + std::to_string(image.channels) + " channels are not supported (1 or 3)");
  const OutputTable table = output_table(steps_, image.channels);
  const std::vector<Stage> stages = plan(steps_, image.height, image.width, g, trace);
  if (trace) {
    trace->scale_denom = 1;
    trace->region_decoded = false;
  }
  execute(image, stages, table, dst, nullptr, nullptr);
}

namespace {

// The DCT scaling for stage 0 of `stages` on a JPEG of h x w, or 1.
int choose_scale(const std::vector<Stage>& stages) {
  const Stage& s = stages.front();
  if (!s.resize || !s.region_inside()) return 1;
  for (int d : {8, 4, 2})
    if (s.region.width >= int64_t{d} * s.out_w && s.region.height >= int64_t{d} * s.out_h) return d;
  return 1;
}

// Stage 0's region mapped into the image decoded at 1/d (scaled_len pixels on that axis).
Axis scaled_axis(int64_t start, int64_t length, int d, int64_t scaled_len, int64_t out_size) {
  const double x0 = static_cast<double>(start) / d, x1 = static_cast<double>(start + length) / d;
  int64_t lo = static_cast<int64_t>(std::floor(x0));
  int64_t hi = static_cast<int64_t>(std::ceil(x1));
  if (hi > scaled_len) hi = scaled_len;
  if (lo >= hi) lo = hi - 1;
  Axis a;
  a.lo = lo;
  a.size = hi - lo;
  a.in0 = x0 - static_cast<double>(lo);
  a.in1 = x1 - static_cast<double>(lo);
  a.out_size = out_size;
  return a;
}

struct Loaded {
  Image image;
  std::vector<Stage> stages;
  int scale = 1;
  bool region = false;  // image holds only stage 0's region (decode_region)
  CropBox window;       // where image lies in the (scaled) image
  Axis ax, ay;          // stage 0's scaled axes (scale > 1), relative to image
};

// Stage 0 reads only its region of the file when the region lies inside the image (a
// RandomResizedCrop, a crop that needs no padding) and is smaller than it.
bool region_worth_asking(const Stage& s) {
  return s.region_inside() && !(s.region == CropBox{0, 0, s.in_h, s.in_w});
}

// Decodes the file, planned from its header first for a JPEG (so the DCT scale and the
// region are known before decoding); on a decoding error the generator is put back
// (torchvision draws nothing for a file it cannot open).
Loaded load_and_plan(const std::vector<TransformStep>& steps, const uint8_t* data, size_t size,
                     const LoadOptions& o, Generator& g, const std::string& name, Trace* trace) {
  Loaded l;
  DecodeOptions dec = o.decode;
  dec.scale_denom = 1;
  if (sniff_format(data, size) != ImageFormat::Jpeg) {
    l.image = decode(data, size, dec, name);
    l.stages = plan(steps, l.image.height, l.image.width, g, trace);
    l.window = CropBox{0, 0, l.image.height, l.image.width};
    return l;
  }
  const ImageInfo info = probe(data, size, name);
  if (o.decode.max_image_pixels > 0 && info.width * info.height > o.decode.max_image_pixels)
    l.image = decode(data, size, dec, name);  // throws the pixel-limit error
  const std::string saved = g.state();
  try {
    l.stages = plan(steps, info.height, info.width, g, trace);
    l.scale = o.decode_scaling ? choose_scale(l.stages) : 1;
    dec.scale_denom = l.scale;
    const Stage& s = l.stages.front();
    const bool ask = o.region_decoding && region_worth_asking(s);
    // The box of the (scaled) image stage 0 reads.
    CropBox box = s.region;
    if (l.scale > 1) {
      const int64_t sw = (info.width + l.scale - 1) / l.scale, sh = (info.height + l.scale - 1) / l.scale;
      l.ax = scaled_axis(s.region.left, s.region.width, l.scale, sw, s.out_w);
      l.ay = scaled_axis(s.region.top, s.region.height, l.scale, sh, s.out_h);
      box = CropBox{l.ay.lo, l.ax.lo, l.ay.size, l.ax.size};
    }
    if (ask) {
      DecodedRegion r = decode_region(data, size, box, dec, name);
      l.image = std::move(r.image);
      l.window = r.window;
      l.region = r.region_decoded;
    } else {
      l.image = decode(data, size, dec, name);
      l.window = CropBox{0, 0, l.image.height, l.image.width};
    }
  } catch (...) {
    g.set_state(saved);
    throw;
  }
  // Stage 0's coordinates into the decoded window.
  if (l.scale > 1) {
    l.ax.lo -= l.window.left;
    l.ay.lo -= l.window.top;
  } else {
    l.stages.front().region.top -= l.window.top;
    l.stages.front().region.left -= l.window.left;
  }
  return l;
}

void run_loaded(const Loaded& l, const OutputTable& table, void* dst) {
  if (l.scale == 1) {
    execute(l.image, l.stages, table, dst, nullptr, nullptr);
    return;
  }
  execute(l.image, l.stages, table, dst, &l.ax, &l.ay);
}

}  // namespace

Tensor Compose::load(const uint8_t* data, size_t size, const LoadOptions& options, Generator& g,
                     const std::string& name, Trace* trace) const {
  Loaded l = load_and_plan(steps_, data, size, options, g, name, trace);
  if (trace) {
    trace->scale_denom = l.scale;
    trace->region_decoded = l.region;
  }
  // The output shape from the full-size dimensions (the plan's), not the scaled image's.
  const Stage& first = l.stages.front();
  const Dims shape = output_shape(first.in_h, first.in_w, l.image.channels);
  const OutputTable table = output_table(steps_, l.image.channels);
  Tensor out = empty_output(shape, output_dtype_);
  run_loaded(l, table, out.data_ptr());
  return out;
}

void Compose::load_into(const uint8_t* data, size_t size, const LoadOptions& options, Generator& g,
                        const std::string& name, void* dst, const Dims& expected_shape, Trace* trace) const {
  Loaded l = load_and_plan(steps_, data, size, options, g, name, trace);
  if (trace) {
    trace->scale_denom = l.scale;
    trace->region_decoded = l.region;
  }
  const Stage& first = l.stages.front();
  const Dims shape = output_shape(first.in_h, first.in_w, l.image.channels);
  if (shape != expected_shape)
    throw ValueError(name + ": the transformed image has shape " + shape.str() + ", the batch expects " +
                     expected_shape.str());
  const OutputTable table = output_table(steps_, l.image.channels);
  run_loaded(l, table, dst);
}

}  // namespace loader::image
