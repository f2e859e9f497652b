// `loader images make` and `loader images export`: image folders to benchmark and train on.
//
//   loader images make --out /tmp/w5 --n 3000 --classes 10 --seed 0
//       a generated ImageNet-like folder, /tmp/w5/<class>/<file>.JPEG (quality 90, 4:2:0),
//       byte-identical for the same arguments; one JSON line: files, bytes, digest
//   loader images export --dataset fashion-mnist --out /tmp/fmnist
//       Fashion-MNIST as PNG ImageFolders /tmp/fmnist/{train,test}/<k>_<class>/<index>.png
//       (8-bit grayscale, the dataset's own pixels; class folders sort in label order)
//
// Both refuse a folder that exists and is not empty (its files would become part of the
// dataset): exit status 2.  A file that cannot be written: exit status 1, naming it.
// The generator is described in images_make.h.
#include <png.h>
#include <turbojpeg.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "command.h"
#include "images_make.h"
#include "loader/error.h"
#include "loader/fashion_mnist.h"

namespace loader::tool {

namespace fs = std::filesystem;

namespace {
using Clock = std::chrono::steady_clock;

// ------------------------------------------------------------------ determinism helpers
/// splitmix64: every image's draws come from its own stream, seeded from (seed, index).
struct Rng {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  /// [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0); }
  float uniform(double lo, double hi) { return static_cast<float>(lo + (hi - lo) * uniform()); }
  int below(int n) { return static_cast<int>(uniform() * n); }
};

Rng image_rng(uint64_t seed, int64_t i) {
  Rng r{seed ^ (static_cast<uint64_t>(i) * 0xD1B54A32D192ED03ull)};
  r.next();
  r.s ^= static_cast<uint64_t>(i) + 0x632BE59BD9B4E019ull;
  r.next();
  return r;
}

constexpr uint64_t kFnvOffset = 0xcbf29ce484222325ull, kFnvPrime = 0x100000001b3ull;

uint64_t fnv1a(const uint8_t* p, size_t n, uint64_t h = kFnvOffset) {
  for (size_t k = 0; k < n; ++k) h = (h ^ p[k]) * kFnvPrime;
  return h;
}

float smooth(float t) { return t * t * (3 - 2 * t); }

// ------------------------------------------------------------------ the generator
/// The buffers of one thread, reused from image to image (no page faults per image).
struct Workspace {
  std::vector<float> img, tex, mask, lattice, tx;
  std::vector<int> ix;
  std::vector<uint8_t> rgb;
};

/// ImageNet-like sizes: mostly 500x375 and 375x500, some 500x333, 333x500, 500x500, the
/// rest any size between 200 and 800 px with an aspect ratio between 0.6 and 1.67.
void draw_size(Rng& rng, int& w, int& h) {
  const double u = rng.uniform();
  if (u < 0.50) w = 500, h = 375;
  else if (u < 0.65) w = 375, h = 500;
  else if (u < 0.75) w = 500, h = 333;
  else if (u < 0.80) w = 333, h = 500;
  else if (u < 0.85) w = 500, h = 500;
  else {
    w = 200 + rng.below(601);
    const double aspect = 0.6 + (1.67 - 0.6) * rng.uniform();
    h = static_cast<int>(std::lround(static_cast<double>(w) / aspect));
    h = std::clamp(h, 200, 800);
  }
}

/// out[y*w + x] += amp * (value noise with lattice cells of `cell` pixels).
void add_octave(Rng& rng, Workspace& ws, std::vector<float>& out, int w, int h, int cell, float amp) {
  const int lw = w / cell + 2, lh = h / cell + 2;
  ws.lattice.resize(static_cast<size_t>(lw) * static_cast<size_t>(lh));
  for (float& v : ws.lattice) v = rng.uniform(-1, 1);
  ws.ix.resize(static_cast<size_t>(w));
  ws.tx.resize(static_cast<size_t>(w));
  const float inv = 1.0f / static_cast<float>(cell);
  for (int x = 0; x < w; ++x) {
    const int ix = x / cell;
    ws.ix[static_cast<size_t>(x)] = ix;
    ws.tx[static_cast<size_t>(x)] = smooth(static_cast<float>(x - ix * cell) * inv);
  }
  for (int y = 0; y < h; ++y) {
    const int iy = y / cell;
    const float ty = smooth(static_cast<float>(y - iy * cell) * inv);
    const float* r0 = &ws.lattice[static_cast<size_t>(iy) * static_cast<size_t>(lw)];
    const float* r1 = r0 + lw;
    float* o = &out[static_cast<size_t>(y) * static_cast<size_t>(w)];
    for (int x = 0; x < w; ++x) {
      const int ix = ws.ix[static_cast<size_t>(x)];
      const float tx = ws.tx[static_cast<size_t>(x)];
      const float a = r0[ix] + tx * (r0[ix + 1] - r0[ix]);
      const float b = r1[ix] + tx * (r1[ix + 1] - r1[ix]);
      o[x] += amp * (a + ty * (b - a));
    }
  }
}

/// Image i of the folder: RGB, w x h, into ws.rgb.  Smooth background gradients, soft
/// rotated ellipses with their own shading, fractal value-noise texture (strong in some
/// regions, faint in others) and per-pixel grain: about 70-110 KB at quality 90 for
/// 500x375, as photos.  Only +, -, *, /, sqrt and float<->int conversions: no libm
/// function whose last bit could differ between C libraries.
void generate(Rng& rng, Workspace& ws, int& w, int& h) {
  draw_size(rng, w, h);
  const size_t px = static_cast<size_t>(w) * static_cast<size_t>(h);
  ws.img.assign(px * 3, 0.f);
  ws.tex.assign(px, 0.f);
  ws.mask.assign(px, 0.f);

  // Background: a coarse grid of colours around a base colour, interpolated smoothly.
  const int gx = 3 + rng.below(4), gy = 3 + rng.below(4);
  std::vector<float> grid(static_cast<size_t>((gx + 1) * (gy + 1) * 3));
  const float base[3] = {rng.uniform(40, 200), rng.uniform(40, 200), rng.uniform(40, 200)};
  for (size_t k = 0; k < grid.size(); ++k) grid[k] = base[k % 3] + rng.uniform(-60, 60);
  std::vector<int> gix(static_cast<size_t>(w));
  std::vector<float> gtx(static_cast<size_t>(w));
  for (int x = 0; x < w; ++x) {
    const float fx = static_cast<float>(x) * static_cast<float>(gx) / static_cast<float>(w);
    const int ix = std::min(static_cast<int>(fx), gx - 1);
    gix[static_cast<size_t>(x)] = ix;
    gtx[static_cast<size_t>(x)] = smooth(fx - static_cast<float>(ix));
  }
  for (int y = 0; y < h; ++y) {
    const float fy = static_cast<float>(y) * static_cast<float>(gy) / static_cast<float>(h);
    const int iy = std::min(static_cast<int>(fy), gy - 1);
    const float ty = smooth(fy - static_cast<float>(iy));
    const float* g0 = &grid[static_cast<size_t>(iy * (gx + 1) * 3)];
    const float* g1 = g0 + (gx + 1) * 3;
    float* row = &ws.img[static_cast<size_t>(y) * static_cast<size_t>(w) * 3];
    for (int x = 0; x < w; ++x) {
      const int ix = gix[static_cast<size_t>(x)];
      const float tx = gtx[static_cast<size_t>(x)];
      for (int c = 0; c < 3; ++c) {
        const float a = g0[ix * 3 + c] + tx * (g0[ix * 3 + 3 + c] - g0[ix * 3 + c]);
        const float b = g1[ix * 3 + c] + tx * (g1[ix * 3 + 3 + c] - g1[ix * 3 + c]);
        row[x * 3 + c] = a + ty * (b - a);
      }
    }
  }

  // Shapes: soft-edged rotated ellipses, each with a colour, a shading gradient and an opacity.
  const int shapes = 4 + rng.below(10);
  for (int s = 0; s < shapes; ++s) {
    const float cx = rng.uniform(0, w), cy = rng.uniform(0, h);
    const float rx = rng.uniform(0.05, 0.35) * static_cast<float>(w);
    const float ry = rng.uniform(0.05, 0.35) * static_cast<float>(h);
    float ca = rng.uniform(-1, 1), sa = rng.uniform(-1, 1);
    const float len = std::sqrt(ca * ca + sa * sa);
    if (len < 1e-3f) ca = 1, sa = 0;
    else ca /= len, sa /= len;
    const float col[3] = {rng.uniform(0, 255), rng.uniform(0, 255), rng.uniform(0, 255)};
    const float grad = rng.uniform(-0.6, 0.6);
    const float soft = rng.uniform(0.02, 0.25);
    const float alpha = rng.uniform(0.5, 1.0);
    const float reach = std::max(rx, ry) * 1.3f;
    const int x0 = std::max(0, static_cast<int>(cx - reach)), x1 = std::min(w, static_cast<int>(cx + reach) + 1);
    const int y0 = std::max(0, static_cast<int>(cy - reach)), y1 = std::min(h, static_cast<int>(cy + reach) + 1);
    const float irx = 1.0f / rx, iry = 1.0f / ry, isoft = 1.0f / (2 * soft);
    for (int y = y0; y < y1; ++y)
      for (int x = x0; x < x1; ++x) {
        const float dx = static_cast<float>(x) - cx, dy = static_cast<float>(y) - cy;
        const float u = (dx * ca + dy * sa) * irx, v = (dy * ca - dx * sa) * iry;
        float a = (1 + soft - std::sqrt(u * u + v * v)) * isoft;
        if (a <= 0) continue;
        a = std::min(a, 1.0f) * alpha;
        const float shade = 1 + grad * u;
        float* p = &ws.img[(static_cast<size_t>(y) * static_cast<size_t>(w) + static_cast<size_t>(x)) * 3];
        for (int c = 0; c < 3; ++c) p[c] = p[c] * (1 - a) + col[c] * shade * a;
      }
  }

  // Texture: value noise of cells 32, 16, ..., 1 px, each octave `rough` times the one
  // before; a mask of cells 96 and 48 decides where it is strong.
  add_octave(rng, ws, ws.mask, w, h, 96, 1.0f);
  add_octave(rng, ws, ws.mask, w, h, 48, 0.5f);
  const float rough = rng.uniform(0.8, 0.95);
  float amp = 1.0f;
  for (int cell = 32; cell >= 1; cell /= 2) {
    add_octave(rng, ws, ws.tex, w, h, cell, cell == 1 ? 0.6f * amp : amp);
    amp *= rough;
  }
  const float detail = 62.0f * rng.uniform(0.8, 1.25);  // texture amplitude, in pixel levels
  const float grain = 8.0f;                             // per-pixel noise, +-levels
  const float tint[3] = {rng.uniform(0.7, 1.1), rng.uniform(0.7, 1.1), rng.uniform(0.7, 1.1)};
  ws.rgb.resize(px * 3);
  uint64_t g = rng.next() | 1;
  for (size_t k = 0; k < px; ++k) {
    const float m = std::clamp(ws.mask[k] * 1.5f + 0.5f, 0.0f, 1.0f);
    const float t = ws.tex[k] * detail * (0.15f + 0.85f * m);
    g ^= g << 13, g ^= g >> 7, g ^= g << 17;  // xorshift64
    const float noise = (static_cast<float>(g >> 40) * (1.0f / 16777216.0f) * 2 - 1) * grain;
    for (size_t c = 0; c < 3; ++c) {
      const float v = std::clamp(ws.img[k * 3 + c] + t * tint[c] + noise, 0.0f, 255.0f);
      ws.rgb[k * 3 + c] = static_cast<uint8_t>(v + 0.5f);
    }
  }
}

// ------------------------------------------------------------------ files
void write_file(const fs::path& path, const uint8_t* data, size_t n) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) throw RuntimeError("cannot create " + path.string() + ": " + std::strerror(errno));
  const size_t put = std::fwrite(data, 1, n, f);
  const int err = put == n ? 0 : errno;
  if (std::fclose(f) != 0 || put != n)
    throw RuntimeError("cannot write " + path.string() + ": " + std::strerror(err ? err : errno) +
                       " (is the disk full?)");
}

/// `out` must not exist, or be an empty folder; then it exists.
void prepare_out(const fs::path& out, const char* what) {
  std::error_code ec;
  if (fs::exists(out, ec)) {
    if (!fs::is_directory(out, ec)) throw ValueError(std::string(what) + ": " + out.string() + " is not a folder");
    if (!fs::is_empty(out, ec))
      throw ValueError(std::string(what) + ": " + out.string() +
                       " exists and is not empty: its files would become part of the dataset; remove it or name "
                       "a new folder");
  }
  fs::create_directories(out, ec);
  if (ec) throw RuntimeError(std::string(what) + ": cannot create " + out.string() + ": " + ec.message());
}

int thread_count(int requested, int64_t jobs) {
  int t = requested > 0 ? requested : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(t, jobs)));
}

/// Runs job(i, worker) for i in [0, n) on `threads` threads; the first exception is
/// rethrown once all have stopped.
template <class Job>
void parallel_for(int64_t n, int threads, Job job) {
  std::atomic<int64_t> next{0};
  std::atomic<bool> failed{false};
  std::exception_ptr error;
  std::mutex mu;
  auto body = [&](int t) {
    try {
      for (int64_t i; !failed && (i = next.fetch_add(1)) < n;) job(i, t);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu);
      if (!error) error = std::current_exception();
      failed = true;
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(body, t);
  body(0);
  for (auto& th : pool) th.join();
  if (error) std::rethrow_exception(error);
}

std::string padded(int64_t v, int width) {
  std::string s = std::to_string(v);
  return s.size() >= static_cast<size_t>(width) ? s : std::string(static_cast<size_t>(width) - s.size(), '0') + s;
}

}  // namespace

// ------------------------------------------------------------------ images make
std::string generated_class_name(int64_t k) { return "n" + padded(k, 7); }

int64_t generated_label_sum(int64_t n, int64_t classes) {
  const int64_t full = n / classes, r = n % classes;
  return full * (classes * (classes - 1) / 2) + r * (r - 1) / 2;
}

ImageFolderSummary make_image_folder(const MakeImagesOptions& o) {
  if (o.n <= 0) throw ValueError("images make: n must be positive, got " + std::to_string(o.n));
  if (o.classes <= 0 || o.classes > 10000000)
    throw ValueError("images make: classes must be in 1..10^7, got " + std::to_string(o.classes));
  if (o.quality < 1 || o.quality > 100)
    throw ValueError("images make: quality must be in 1..100, got " + std::to_string(o.quality));
  const auto t0 = Clock::now();
  const fs::path out(o.out);
  prepare_out(out, "images make");
  for (int64_t c = 0; c < std::min(o.classes, o.n); ++c) {
    std::error_code ec;
    fs::create_directory(out / generated_class_name(c), ec);
    if (ec) throw RuntimeError("images make: cannot create " + (out / generated_class_name(c)).string() + ": " + ec.message());
  }
  const int threads = thread_count(o.threads, o.n);
  std::vector<uint64_t> digests(static_cast<size_t>(o.n));
  std::vector<int64_t> sizes(static_cast<size_t>(o.n)), pixels(static_cast<size_t>(o.n));
  struct PerThread {
    Workspace ws;
    tjhandle tj = nullptr;
    ~PerThread() {
      if (tj) tjDestroy(tj);
    }
  };
  std::vector<PerThread> per(static_cast<size_t>(threads));
  parallel_for(o.n, threads, [&](int64_t i, int t) {
    PerThread& p = per[static_cast<size_t>(t)];
    if (!p.tj && !(p.tj = tjInitCompress()))
      throw RuntimeError(std::string("images make: tjInitCompress failed: ") + tjGetErrorStr2(nullptr));
    Rng rng = image_rng(o.seed, i);
    int w = 0, h = 0;
    generate(rng, p.ws, w, h);
    unsigned char* jpeg = nullptr;
    unsigned long len = 0;
    if (tjCompress2(p.tj, p.ws.rgb.data(), w, 0, h, TJPF_RGB, &jpeg, &len, TJSAMP_420, o.quality, 0) != 0) {
      std::string why = tjGetErrorStr2(p.tj);
      tjFree(jpeg);
      throw RuntimeError("images make: tjCompress2 failed for image " + std::to_string(i) + ": " + why);
    }
    std::unique_ptr<unsigned char, void (*)(unsigned char*)> owned(jpeg, [](unsigned char* q) { tjFree(q); });
    const std::string cls = generated_class_name(i % o.classes);
    write_file(out / cls / (cls + "_" + padded(i, 8) + ".JPEG"), jpeg, len);
    digests[static_cast<size_t>(i)] = fnv1a(jpeg, len);
    sizes[static_cast<size_t>(i)] = static_cast<int64_t>(len);
    pixels[static_cast<size_t>(i)] = static_cast<int64_t>(w) * h;
  });
  ImageFolderSummary s;
  s.out = o.out;
  s.files = o.n;
  s.classes = std::min(o.classes, o.n);
  s.digest = kFnvOffset;
  for (int64_t i = 0; i < o.n; ++i) {
    s.bytes += sizes[static_cast<size_t>(i)];
    s.pixels += pixels[static_cast<size_t>(i)];
    s.digest = fnv1a(reinterpret_cast<const uint8_t*>(&digests[static_cast<size_t>(i)]), 8, s.digest);
  }
  s.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return s;
}

// ------------------------------------------------------------------ images export
std::vector<std::string> fashion_mnist_folder_names() {
  std::vector<std::string> out;
  const auto& names = FashionMNIST::classes();
  for (size_t k = 0; k < names.size(); ++k) {
    std::string safe = names[k];
    for (char& c : safe)
      if (c == '/' || c == ' ' || c == '\\') c = '_';
    out.push_back(std::to_string(k) + "_" + safe);
  }
  return out;
}

namespace {

/// An 8-bit grayscale PNG of `rows` x `cols` pixels (libpng's simplified API).
void write_gray_png(const fs::path& path, const uint8_t* pixels, int rows, int cols) {
  png_image image;
  std::memset(&image, 0, sizeof image);
  image.version = PNG_IMAGE_VERSION;
  image.width = static_cast<png_uint_32>(cols);
  image.height = static_cast<png_uint_32>(rows);
  image.format = PNG_FORMAT_GRAY;
  if (!png_image_write_to_file(&image, path.c_str(), 0, pixels, cols, nullptr)) {
    std::string why = image.message;
    png_image_free(&image);
    throw RuntimeError("images export: cannot write " + path.string() + ": " + why);
  }
}

struct ExportOptions {
  std::string dataset = "fashion-mnist";
  std::string root = FashionMNIST::kDefaultRoot;
  std::string out;
  int threads = 0;
};

int run_export(const ExportOptions& o) {
  if (o.dataset != "fashion-mnist")
    throw UsageError("--dataset: only fashion-mnist can be exported, got '" + o.dataset + "'");
  const fs::path out(o.out);
  std::error_code out_ec;
  if (fs::exists(out, out_ec) && (!fs::is_directory(out, out_ec) || !fs::is_empty(out, out_ec)))
    throw UsageError("--out: " + o.out + " exists and is not an empty folder: remove it or name a new folder");
  const auto t0 = Clock::now();
  // Both splits first: a missing or bad file is reported before anything is written.
  const FashionMNIST splits[2] = {FashionMNIST(o.root, true), FashionMNIST(o.root, false)};
  prepare_out(out, "images export");
  const auto folders = fashion_mnist_folder_names();
  nlohmann::ordered_json j;
  j["dataset"] = o.dataset;
  j["out"] = o.out;
  int64_t bytes = 0;
  for (const FashionMNIST& ds : splits) {
    const bool train = ds.train();
    const fs::path split = out / (train ? "train" : "test");
    for (const auto& name : folders) {
      std::error_code ec;
      fs::create_directories(split / name, ec);
      if (ec) throw RuntimeError("images export: cannot create " + (split / name).string() + ": " + ec.message());
    }
    const int64_t n = ds.size();
    const int digits = static_cast<int>(std::to_string(n - 1).size());
    std::vector<int64_t> sizes(static_cast<size_t>(n));
    parallel_for(n, thread_count(o.threads, n), [&](int64_t i, int) {
      const fs::path file =
          split / folders[static_cast<size_t>(ds.label(i))] / (padded(i, digits) + ".png");
      write_gray_png(file, ds.pixels(i), static_cast<int>(FashionMNIST::kRows), static_cast<int>(FashionMNIST::kCols));
      std::error_code ec;
      sizes[static_cast<size_t>(i)] = static_cast<int64_t>(fs::file_size(file, ec));
    });
    for (int64_t s : sizes) bytes += s;
    j[train ? "train" : "test"] = n;
  }
  j["classes"] = folders;
  j["bytes"] = bytes;
  j["seconds"] = std::chrono::duration<double>(Clock::now() - t0).count();
  std::cout << j.dump() << std::endl;
  return 0;
}

}  // namespace

void add_images_make_commands(CLI::App* images) {
  {
    auto* cmd = images->add_subcommand(
        "make", "Write a generated ImageNet-like JPEG folder (DIR/<class>/<file>.JPEG, quality 90, 4:2:0), the same "
                "bytes for the same arguments; prints one JSON line (files, bytes, digest)");
    auto o = std::make_shared<MakeImagesOptions>();
    auto seed = std::make_shared<int64_t>(0);
    auto quality = std::make_shared<int64_t>(90), threads = std::make_shared<int64_t>(0);
    cmd->add_option("--out", o->out, "the folder to write (must not exist, or be empty)")->required();
    cmd->add_option("--n", o->n, "number of images (default 3000)")->check(kInt64);
    cmd->add_option("--classes", o->classes, "number of class folders n0000000, n0000001, ... (default 10); image i "
                                             "is class i % classes")
        ->check(kInt64);
    cmd->add_option("--seed", *seed, "seed: every image is drawn from (seed, its index) (default 0)")->check(kInt64);
    cmd->add_option("--quality", *quality, "JPEG quality 1..100 (default 90)")->check(kInt64);
    cmd->add_option("--threads", *threads, "threads (default: one per CPU; the files do not depend on it)")
        ->check(kInt64);
    on_run(cmd, [o, seed, quality, threads] {
      if (o->n <= 0) throw UsageError("--n must be positive, got " + std::to_string(o->n));
      if (o->classes <= 0 || o->classes > 10000000)
        throw UsageError("--classes must be in 1..10000000, got " + std::to_string(o->classes));
      if (*quality < 1 || *quality > 100) throw UsageError("--quality must be in 1..100, got " + std::to_string(*quality));
      if (*threads < 0 || *threads > 1024) throw UsageError("--threads must be in 0..1024");
      MakeImagesOptions opts = *o;
      opts.seed = static_cast<uint64_t>(*seed);
      opts.quality = static_cast<int>(*quality);
      opts.threads = static_cast<int>(*threads);
      std::error_code ec;
      if (fs::exists(opts.out, ec) && (!fs::is_directory(opts.out, ec) || !fs::is_empty(opts.out, ec)))
        throw UsageError("--out: " + opts.out + " exists and is not an empty folder: remove it or name a new folder");
      const ImageFolderSummary s = make_image_folder(opts);
      nlohmann::ordered_json j;
      j["out"] = s.out;
      j["files"] = s.files;
      j["classes"] = s.classes;
      j["bytes"] = s.bytes;
      j["mean_bytes"] = static_cast<double>(s.bytes) / static_cast<double>(s.files);
      j["mean_pixels"] = static_cast<double>(s.pixels) / static_cast<double>(s.files);
      j["seed"] = *seed;
      j["quality"] = opts.quality;
      char digest[17];
      std::snprintf(digest, sizeof digest, "%016llx", static_cast<unsigned long long>(s.digest));
      j["digest"] = digest;
      j["seconds"] = s.seconds;
      std::cout << j.dump() << std::endl;
      return 0;
    });
  }
  {
    auto* cmd = images->add_subcommand(
        "export", "Write a dataset as PNG ImageFolders DIR/train/<class>/<index>.png and DIR/test/...: 8-bit "
                  "grayscale, the dataset's pixels; class folders named <label>_<class> so that sorted names give "
                  "the label order");
    auto o = std::make_shared<ExportOptions>();
    auto threads = std::make_shared<int64_t>(0);
    cmd->add_option("--dataset", o->dataset, "fashion-mnist (the only one)")->required();
    cmd->add_option("--root", o->root, "the dataset's files (default /usr/share/datasets/fashion-mnist)");
    cmd->add_option("--out", o->out, "the folder to write (must not exist, or be empty)")->required();
    cmd->add_option("--threads", *threads, "threads (default: one per CPU)")->check(kInt64);
    on_run(cmd, [o, threads] {
      if (*threads < 0 || *threads > 1024) throw UsageError("--threads must be in 0..1024");
      ExportOptions opts = *o;
      opts.threads = static_cast<int>(*threads);
      return run_export(opts);
    });
  }
}

}  // namespace loader::tool
