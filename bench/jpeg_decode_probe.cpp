// The libjpeg-turbo decode limit on this machine: how many of a folder's JPEG files plain
// tjDecompress2 decodes per second (RGB, full size, the library's default accurate IDCT
// and fancy upsampling, as PIL and loader's decoder use) on 1..K threads, every file
// read into memory first.  W5 (bench/WORKLOADS.md) compares `loader bench --workload W5`
// against it: "W5 >= 75% of the decode limit measured in the same run".
//
//   build/bench/jpeg_decode_probe --root /tmp/w5 --threads 1,2 --passes 3
//   {"probe":"tjDecompress2","threads":1,"files":3000,"bytes":...,"images_per_s":...,"MB_per_s":...}
//
// One JSON line per thread count on stdout: files, bytes (of JPEG read), images_per_s and
// MB_per_s (JPEG bytes decoded per second, 1e6 bytes) and Mpix_per_s, each the median over
// --passes passes over all files (the passes' figures too), and the best pass.  Threads
// take files from a shared counter, each decoding into a buffer of its own, reused.
//
// --pipeline train|eval: then, on one thread, where the time of loader's image pipeline
// goes per file (what a W5 worker does for each sample): read_ms (loader::image::read_file,
// from the page cache), decode_ms (loader::image::decode, RGB, full size: the full
// decode), region_decode_ms (loader::image::decode_region of the box the pipeline's first
// step reads, drawn from the header as load() draws it: RandomResizedCrop's box for
// train, the whole image for eval) and region_share (the share of files it decoded only
// in part; the rest fell back to a full decode), decode_saved_ms (decode_ms -
// region_decode_ms), transform_ms (the preset Compose's apply_into of the full decode into
// a float32 [3, 224, 224] row: crop + resize + flip + ToTensor + Normalize in its fused
// passes), load_ms (decode and transform in one load_into call, region decoding on, as
// the dataset makes it), load_full_ms (the same with region_decoding off) and
// scaled_load_ms (load_ms with decode_scaling too), each the median over --passes of the
// mean per file (the first --pipeline-files files, default 600).  One JSON line
// {"probe": "pipeline", ...}.
// Exit status 2 for bad arguments, 1 when a file cannot be read or decoded.
#include <turbojpeg.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "loader/generator.h"
#include "loader/image/decode.h"
#include "loader/image/transforms.h"

namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;

struct Usage : std::runtime_error {
  using std::runtime_error::runtime_error;
};

const char* kUsage =
    "usage: jpeg_decode_probe --root DIR [--threads 1,2] [--passes P] [--limit N] [--pipeline train|eval]\n"
    "  --root DIR     a folder of JPEG files (*.JPEG, *.jpg, *.jpeg, in sub-folders too: an ImageFolder)\n"
    "  --threads LIST thread counts to measure (default 1 up to the number of CPUs)\n"
    "  --passes P     passes over all files per thread count; the median counts (default 3)\n"
    "  --limit N      only the first N files in sorted order (default all)\n"
    "  --pipeline T   also time loader's read / decode / transform per file (one thread) with the\n"
    "                 preset transform T (train or eval)\n"
    "  --pipeline-files N  --pipeline: the first N files (default 600)\n";

int64_t parse_int(const std::string& flag, const std::string& text, int64_t lo) {
  char* end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || v < lo)
    throw Usage(flag + " expects an integer >= " + std::to_string(lo) + ", got '" + text + "'");
  return v;
}

bool is_jpeg_name(const fs::path& p) {
  std::string ext = p.extension().string();
  for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return ext == ".jpeg" || ext == ".jpg";
}

std::string read_all(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) throw std::runtime_error("cannot open " + p.string() + ": " + std::strerror(errno));
  std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (f.bad()) throw std::runtime_error("cannot read " + p.string());
  return s;
}

struct File {
  std::string bytes;
  int width = 0, height = 0;
};

struct Pass {
  double seconds;
  std::string error;
};

Pass decode_all(const std::vector<File>& files, int threads, size_t max_pixels) {
  std::atomic<size_t> next{0};
  std::vector<std::string> errors(static_cast<size_t>(threads));
  auto body = [&](int t) {
    tjhandle tj = tjInitDecompress();
    if (!tj) {
      errors[static_cast<size_t>(t)] = std::string("tjInitDecompress failed: ") + tjGetErrorStr2(nullptr);
      return;
    }
    std::vector<unsigned char> rgb(max_pixels * 3);
    for (size_t i; (i = next.fetch_add(1)) < files.size();) {
      const File& f = files[i];
      if (tjDecompress2(tj, reinterpret_cast<const unsigned char*>(f.bytes.data()), f.bytes.size(), rgb.data(),
                        f.width, 0, f.height, TJPF_RGB, 0) != 0 &&
          tjGetErrorCode(tj) == TJERR_FATAL) {
        errors[static_cast<size_t>(t)] = "file " + std::to_string(i) + ": " + tjGetErrorStr2(tj);
        break;
      }
    }
    tjDestroy(tj);
  };
  const auto t0 = Clock::now();
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(body, t);
  body(0);
  for (auto& th : pool) th.join();
  Pass p{std::chrono::duration<double>(Clock::now() - t0).count(), ""};
  for (auto& e : errors)
    if (!e.empty()) p.error = e;
  return p;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

/// --pipeline: loader's per-file steps on one thread (see the top of the file).
void time_pipeline(const std::vector<fs::path>& paths, const std::vector<File>& files, const std::string& preset,
                   int64_t passes) {
  namespace img = loader::image;
  const img::Compose compose = img::Compose::preset(preset, 224);
  const loader::Dims shape = *compose.fixed_output_shape(3);
  std::vector<float> out(static_cast<size_t>(shape[0] * shape[1] * shape[2]));
  loader::Generator g(0);
  img::LoadOptions region, full, scaled;
  full.region_decoding = false;
  scaled.decode_scaling = true;
  const img::TransformStep& first = compose.steps().front();
  const bool rrc = first.kind == img::TransformStep::Kind::RandomResizedCrop;
  std::vector<double> read_ms, decode_ms, region_ms, transform_ms, load_ms, load_full_ms, scaled_ms;
  size_t region_files = 0;
  const double n = static_cast<double>(files.size());
  for (int64_t p = 0; p < passes; ++p) {
    double r = 0, d = 0, rd = 0, t = 0, ld = 0, lf = 0, sc = 0;
    region_files = 0;
    for (size_t i = 0; i < files.size(); ++i) {
      const std::string name = paths[i].string();
      auto t0 = Clock::now();
      const std::string bytes = img::read_file(name);
      r += ms_since(t0);
      const auto* data = reinterpret_cast<const uint8_t*>(bytes.data());
      t0 = Clock::now();
      const img::Image image = img::decode(data, bytes.size(), {}, name);
      d += ms_since(t0);
      t0 = Clock::now();
      const img::ImageInfo info = img::probe(data, bytes.size(), name);
      const img::CropBox box = rrc ? img::random_resized_crop_params(info.height, info.width, first.scale, first.ratio, g)
                                   : img::CropBox{0, 0, info.height, info.width};
      const img::DecodedRegion part = img::decode_region(data, bytes.size(), box, {}, name);
      rd += ms_since(t0);
      if (part.region_decoded) ++region_files;
      t0 = Clock::now();
      compose.apply_into(image, g, out.data());
      t += ms_since(t0);
      t0 = Clock::now();
      compose.load_into(data, bytes.size(), region, g, name, out.data(), shape);
      ld += ms_since(t0);
      t0 = Clock::now();
      compose.load_into(data, bytes.size(), full, g, name, out.data(), shape);
      lf += ms_since(t0);
      t0 = Clock::now();
      compose.load_into(data, bytes.size(), scaled, g, name, out.data(), shape);
      sc += ms_since(t0);
    }
    read_ms.push_back(r / n);
    decode_ms.push_back(d / n);
    region_ms.push_back(rd / n);
    transform_ms.push_back(t / n);
    load_ms.push_back(ld / n);
    load_full_ms.push_back(lf / n);
    scaled_ms.push_back(sc / n);
  }
  const double r = median(read_ms), d = median(decode_ms), rd = median(region_ms), t = median(transform_ms),
               ld = median(load_ms), lf = median(load_full_ms), sc = median(scaled_ms);
  const double share = static_cast<double>(region_files) / n;
  nlohmann::ordered_json j;
  j["probe"] = "pipeline";
  j["transform"] = preset;
  j["threads"] = 1;
  j["files"] = files.size();
  j["passes"] = passes;
  j["read_ms"] = r;
  j["decode_ms"] = d;
  j["region_decode_ms"] = rd;
  j["region_share"] = share;
  j["decode_saved_ms"] = d - rd;
  j["transform_ms"] = t;
  j["total_ms"] = r + d + t;
  j["images_per_s"] = 1000.0 / (r + d + t);
  j["load_ms"] = ld;
  j["load_images_per_s"] = 1000.0 / (r + ld);
  j["load_full_ms"] = lf;
  j["scaled_load_ms"] = sc;
  j["scaled_images_per_s"] = 1000.0 / (r + sc);
  std::cout << j.dump() << std::endl;
  std::fprintf(stderr,
               "[jpeg_decode_probe] pipeline %s, 1 thread, per file: read %.3f ms; full decode %.3f ms, region decode "
               "%.3f ms (%.0f%% of files region-decoded, %.3f ms saved); transform %.3f ms; load (region decode + "
               "transform) %.3f ms, with full decoding %.3f ms, with decode_scaling %.3f ms\n",
               preset.c_str(), r, d, rd, 100.0 * share, d - rd, t, ld, lf, sc);
}

int run(int argc, char** argv) {
  std::string root;
  std::vector<int> threads;
  int64_t passes = 3, limit = 0, pipeline_limit = 600;
  std::string pipeline;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::cout << kUsage;
      return 0;
    }
    if (i + 1 >= argc) throw Usage(a + " needs a value");
    std::string v = argv[++i];
    if (a == "--root") root = v;
    else if (a == "--threads") {
      std::stringstream ss(v);
      std::string item;
      while (std::getline(ss, item, ',')) threads.push_back(static_cast<int>(parse_int(a, item, 1)));
    } else if (a == "--passes") passes = parse_int(a, v, 1);
    else if (a == "--limit") limit = parse_int(a, v, 1);
    else if (a == "--pipeline") {
      if (v != "train" && v != "eval") throw Usage("--pipeline must be train or eval, got '" + v + "'");
      pipeline = v;
    } else if (a == "--pipeline-files") pipeline_limit = parse_int(a, v, 1);
    else throw Usage("unknown option " + a);
  }
  if (root.empty()) throw Usage("--root is required");
  if (threads.empty())
    for (int t = 1; t <= static_cast<int>(std::max(1u, std::thread::hardware_concurrency())); ++t) threads.push_back(t);
  std::error_code ec;
  if (!fs::is_directory(root, ec)) throw Usage("--root: " + root + " is not a folder");

  std::vector<fs::path> paths;
  for (auto it = fs::recursive_directory_iterator(root, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec))
    if (it->is_regular_file() && is_jpeg_name(it->path())) paths.push_back(it->path());
  if (ec) throw std::runtime_error("cannot list " + root + ": " + ec.message());
  std::sort(paths.begin(), paths.end());
  if (limit > 0 && static_cast<size_t>(limit) < paths.size()) paths.resize(static_cast<size_t>(limit));
  if (paths.empty()) throw std::runtime_error("no JPEG files (*.JPEG, *.jpg, *.jpeg) under " + root);

  std::vector<File> files(paths.size());
  uint64_t bytes = 0, pixels = 0;
  size_t max_pixels = 0;
  tjhandle tj = tjInitDecompress();
  for (size_t i = 0; i < paths.size(); ++i) {
    File& f = files[i];
    f.bytes = read_all(paths[i]);
    int subsamp = 0, colorspace = 0;
    if (tjDecompressHeader3(tj, reinterpret_cast<const unsigned char*>(f.bytes.data()), f.bytes.size(), &f.width,
                            &f.height, &subsamp, &colorspace) != 0)
      throw std::runtime_error(paths[i].string() + ": not a JPEG file: " + tjGetErrorStr2(tj));
    bytes += f.bytes.size();
    pixels += static_cast<uint64_t>(f.width) * static_cast<uint64_t>(f.height);
    max_pixels = std::max(max_pixels, static_cast<size_t>(f.width) * static_cast<size_t>(f.height));
  }
  tjDestroy(tj);

  decode_all(files, 1, max_pixels);  // warm-up: page cache, allocator, CPU clocks
  for (int t : threads) {
    std::vector<double> secs;
    for (int64_t p = 0; p < passes; ++p) {
      Pass r = decode_all(files, t, max_pixels);
      if (!r.error.empty()) throw std::runtime_error("tjDecompress2: " + r.error);
      secs.push_back(r.seconds);
    }
    const double s = median(secs), best = *std::min_element(secs.begin(), secs.end());
    const double n = static_cast<double>(files.size());
    nlohmann::ordered_json j;
    j["probe"] = "tjDecompress2";
    j["threads"] = t;
    j["files"] = files.size();
    j["bytes"] = bytes;
    j["mean_pixels"] = static_cast<double>(pixels) / n;
    j["passes"] = passes;
    j["images_per_s"] = n / s;
    j["MB_per_s"] = static_cast<double>(bytes) / s / 1e6;
    j["Mpix_per_s"] = static_cast<double>(pixels) / s / 1e6;
    j["best_images_per_s"] = n / best;
    j["pass_seconds"] = secs;
    j["cpus"] = std::thread::hardware_concurrency();
    std::cout << j.dump() << std::endl;
    std::fprintf(stderr, "[jpeg_decode_probe] %d thread%s: %.0f images/s, %.1f MB/s of JPEG (%zu files, median of %lld)\n",
                 t, t == 1 ? "" : "s", n / s, static_cast<double>(bytes) / s / 1e6, files.size(),
                 static_cast<long long>(passes));
  }
  if (!pipeline.empty()) {
    const size_t m = std::min(files.size(), static_cast<size_t>(pipeline_limit));
    time_pipeline(std::vector<fs::path>(paths.begin(), paths.begin() + static_cast<std::ptrdiff_t>(m)),
                  std::vector<File>(files.begin(), files.begin() + static_cast<std::ptrdiff_t>(m)), pipeline, passes);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const Usage& e) {
    std::cerr << "jpeg_decode_probe: " << e.what() << "\n" << kUsage;
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "jpeg_decode_probe: " << e.what() << "\n";
    return 1;
  }
}
