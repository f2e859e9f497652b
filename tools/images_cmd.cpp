// `loader images ...`: the image datasets from the command line (datasets/loader/image).
//
//   loader images list ROOT        # {"classes": [...]} then {"path": ..., "class_index": ...}
//                                  # per sample, one JSON line each, in ImageFolder's order
//   loader images get ROOT --index I [--transform none|train|eval] [--size N] [--seed S]
//                                  [--decode-scaling] [--mode RGB|L] --out F.pt
//                                  # sample I's image as torch.save(tensor): uint8 [C, H, W]
//                                  # for none, float32 for train / eval; one JSON line on
//                                  # stdout: path, class_index, shape, dtype and the draws
//
// The presets (transforms.h, Compose::preset) for an output of N x N (default 224):
//   train: RandomResizedCrop(N), RandomHorizontalFlip(), ToTensor(), Normalize(ImageNet)
//   eval:  Resize(int(N * 256 / 224)), CenterCrop(N), ToTensor(), Normalize(ImageNet)
// with the random parameters drawn as torchvision 0.14 draws them after torch.manual_seed(S)
// (without --seed, from torch's default seed).
//
// Other files add subcommands to the group through add_images_make_commands (command.h).
// Exit status 1 for a file that cannot be read or written, 2 for bad arguments.
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "command.h"
#include "loader/generator.h"
#include "loader/image/image_folder.h"
#include "loader/serialization/pt.h"

namespace loader::tool {

// Used while no other file of the tool defines add_images_make_commands (command.h).
__attribute__((weak)) void add_images_make_commands(CLI::App* /*images*/) {}

namespace {

using nlohmann::json;

constexpr auto kJsonReplace = json::error_handler_t::replace;  // file names need not be UTF-8

struct ListOptions {
  std::string root;
};

int run_images_list(const ListOptions& o) {
  if (o.root.empty()) throw CLI::RequiredError("ROOT");
  const image::ImageFolder ds(o.root);
  std::cout << json{{"classes", ds.classes()}}.dump(-1, ' ', false, kJsonReplace) << "\n";
  for (const auto& s : ds.samples())
    std::cout << json{{"path", s.path}, {"class_index", s.target}}.dump(-1, ' ', false, kJsonReplace) << "\n";
  return 0;
}

struct GetOptions {
  std::string root;
  std::optional<int64_t> index;
  std::string transform = "none";
  int64_t size = 224;
  std::optional<int64_t> seed;
  bool decode_scaling = false;
  std::string mode = "RGB";
  std::string out;
};

int run_images_get(const GetOptions& o) {
  if (o.root.empty()) throw CLI::RequiredError("ROOT");
  if (!o.index) throw CLI::RequiredError("--index");
  if (o.out.empty()) throw CLI::RequiredError("--out");
  if (o.size <= 0) throw UsageError("--size must be positive, got " + std::to_string(o.size));
  if (o.mode == "L" && o.transform != "none")
    throw UsageError("--mode L: the " + o.transform +
                     " preset normalises 3 channels with ImageNet's mean and std; use --mode RGB, or --transform none");
  image::ImageDatasetOptions opts;
  opts.transform = image::Compose::preset(o.transform, o.size);
  opts.mode = image::parse_mode(o.mode, "--mode");
  opts.decode_scaling = o.decode_scaling;
  image::ImageFolder ds(o.root, opts);
  const int64_t n = ds.size();
  if (*o.index < -n || *o.index >= n)
    throw UsageError("--index " + std::to_string(*o.index) + " is out of range: " + o.root + " has " +
                     std::to_string(n) + " samples");
  const int64_t i = *o.index < 0 ? *o.index + n : *o.index;
  if (o.seed) manual_seed(static_cast<uint64_t>(*o.seed));
  image::Trace trace;
  const Tensor img = ds.image(i, &trace);
  pt::save(Value(img), o.out);

  json crops = json::array();
  for (const auto& b : trace.crops) crops.push_back({b.top, b.left, b.height, b.width});
  const auto& s = ds.samples()[static_cast<size_t>(i)];
  json line{{"index", i},
            {"path", s.path},
            {"class_index", s.target},
            {"shape", img.sizes().vec()},
            {"dtype", dtype_name(img.dtype())},
            {"crops", crops},
            {"flips", trace.flips},
            {"scale_denom", trace.scale_denom},
            {"out", o.out}};
  std::cout << line.dump(-1, ' ', false, kJsonReplace) << "\n";
  return 0;
}

}  // namespace

void add_images_commands(CLI::App& app) {
  CLI::App* images = app.add_subcommand("images", "Image folders: list their samples, decode and transform one");
  require_subcommand(images);

  CLI::App* list = images->add_subcommand(
      "list", "Print an image folder's classes and samples (torchvision's ImageFolder order) as JSON lines");
  auto l = std::make_shared<ListOptions>();
  list->add_option("ROOT", l->root, "the folder holding one directory per class (required)");
  on_run(list, [l] { return run_images_list(*l); });

  CLI::App* get = images->add_subcommand("get", "Decode and transform one sample of an image folder into a .pt file");
  auto g = std::make_shared<GetOptions>();
  get->add_option("ROOT", g->root, "the folder holding one directory per class (required)");
  get->add_option("--index", g->index, "the sample's index in `images list` order (required; negative: from the end)")
      ->check(kInt64);
  get->add_option("--transform", g->transform, "none (uint8 [C, H, W]), train or eval (float32, normalised)")
      ->check(CLI::IsMember({"none", "train", "eval"}));
  get->add_option("--size", g->size, "the train / eval output size N (N x N; default 224)")->check(kInt64);
  get->add_option("--seed", g->seed, "torch.manual_seed(S) before the sample's random draws")->check(kInt64);
  get->add_flag("--decode-scaling", g->decode_scaling,
                "decode JPEGs at 1/2, 1/4 or 1/8 scale when the crop shrinks by 2x or more (faster, not exact)");
  get->add_option("--mode", g->mode, "RGB (default) or L")->check(CLI::IsMember({"RGB", "L"}));
  get->add_option("--out", g->out, "the .pt file to write (required)");
  on_run(get, [g] { return run_images_get(*g); });

  add_images_make_commands(images);
}

}  // namespace loader::tool
