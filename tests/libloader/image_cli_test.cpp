// `loader images list` and `loader images get` (tools/images_cmd.cpp): torchvision's order as
// JSON lines, a sample written as a .pt file that torch.load opens and that equals
// torchvision's transform of the same file after the same seed, and the exit statuses.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "image_test_util.h"
#include "loader/generator.h"
#include "loader/image/image_folder.h"
#include "loader/serialization/pt.h"
#include "pt_test_util.h"

namespace {

using namespace loader::testing;

const std::string kTool = std::string(LOADER_BINARY_DIR) + "/loader";

#define REQUIRE_TOOL() \
  if (!std::filesystem::exists(kTool)) GTEST_SKIP() << "the loader tool is not built at " << kTool

CommandResult tool(const std::string& args, bool merge_stderr = true) {
  return run_command(shell_quote(kTool) + " " + args + (merge_stderr ? " 2>&1" : " 2>/dev/null"));
}

std::vector<nlohmann::json> json_lines(const std::string& text) {
  std::vector<nlohmann::json> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  return out;
}

class ImageCli : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = dir_.file("data");
    const std::pair<const char*, const char*> files[] = {
        {"b/x.jpg", "rgb420_big.jpg"}, {"a/y.png", "rgb8.png"}, {"a/z.jpg", "rgb444.jpg"}};
    for (const auto& [to, from] : files) {
      std::filesystem::create_directories(std::filesystem::path(root_ + "/" + to).parent_path());
      std::ofstream(root_ + "/" + to, std::ios::binary) << image_bytes(from);
    }
  }
  TempDir dir_;
  std::string root_;
};

TEST_F(ImageCli, ListPrintsClassesThenSamples) {
  REQUIRE_TOOL();
  const auto r = tool("images list " + shell_quote(root_), false);
  ASSERT_EQ(r.status, 0) << r.output;
  const auto lines = json_lines(r.output);
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[0], nlohmann::json({{"classes", {"a", "b"}}}));
  EXPECT_EQ(lines[1], nlohmann::json({{"path", root_ + "/a/y.png"}, {"class_index", 0}}));
  EXPECT_EQ(lines[2], nlohmann::json({{"path", root_ + "/a/z.jpg"}, {"class_index", 0}}));
  EXPECT_EQ(lines[3], nlohmann::json({{"path", root_ + "/b/x.jpg"}, {"class_index", 1}}));
}

TEST_F(ImageCli, GetWritesTheTransformedSample) {
  REQUIRE_TOOL();
  const std::string out = dir_.file("s.pt");
  for (const char* preset : {"none", "train", "eval"}) {
    SCOPED_TRACE(preset);
    const auto r = tool("images get " + shell_quote(root_) + " --index 2 --transform " + preset +
                            " --size 24 --seed 5 --out " + shell_quote(out),
                        false);
    ASSERT_EQ(r.status, 0) << r.output;
    const auto line = json_lines(r.output).at(0);
    EXPECT_EQ(line["path"], root_ + "/b/x.jpg");
    EXPECT_EQ(line["class_index"], 1);
    EXPECT_EQ(line["crops"].size(), std::string(preset) == "train" ? 1u : 0u);
    const loader::Tensor t = loader::pt::tensor_of(loader::pt::load(out));
    // The same sample in-process after the same seed.
    loader::image::ImageDatasetOptions o;
    o.transform = loader::image::Compose::preset(preset, 24);
    loader::image::ImageFolder ds(root_, o);
    loader::manual_seed(5);
    const loader::Tensor want = ds.image(2);
    EXPECT_TRUE(t.bitwise_equal(want));
    EXPECT_EQ(t.dtype(), std::string(preset) == "none" ? loader::DType::UInt8 : loader::DType::Float32);
    EXPECT_EQ(nlohmann::json(t.sizes().vec()), line["shape"]);
  }
}

// torch.load opens the file, and it equals torchvision's output for the same file and seed.
TEST_F(ImageCli, GetEqualsTorchvision) {
  REQUIRE_TOOL();
  const std::string& py = torch_python();
  if (py.empty() || run_command(shell_quote(py) + " -c 'import torchvision' 2>/dev/null").status != 0)
    GTEST_SKIP() << "no Python with torch and torchvision (/usr/bin/python3, or LOADER_PYTHON)";
  // The files first, then one Python run checks them all (importing torch takes seconds).
  const std::string script = dir_.file("check.py");
  std::ofstream(script) << R"(import sys, torch
from PIL import Image
from torchvision import transforms as T
path = sys.argv[1]
norm = T.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
for case in sys.argv[2:]:
    out, preset, size, seed = case.split(":")
    size, seed = int(size), int(seed)
    if preset == "train":
        tr = T.Compose([T.RandomResizedCrop(size), T.RandomHorizontalFlip(), T.ToTensor(), norm])
    else:
        tr = T.Compose([T.Resize(int(size * 256 / 224)), T.CenterCrop(size), T.ToTensor(), norm])
    torch.manual_seed(seed)
    with open(path, "rb") as f:
        want = tr(Image.open(f).convert("RGB"))
    got = torch.load(out)
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape, want.shape)
    print(preset, seed, "maxdiff", float((got - want).abs().max()))
)";
  std::string cases, expected;
  for (const char* preset : {"train", "eval"}) {
    for (int seed : {0, 1, 42}) {
      const std::string out = dir_.file(std::string(preset) + std::to_string(seed) + ".pt");
      const auto r = tool("images get " + shell_quote(root_) + " --index 2 --transform " + preset +
                          " --size 32 --seed " + std::to_string(seed) + " --out " + shell_quote(out));
      ASSERT_EQ(r.status, 0) << r.output;
      cases += " " + shell_quote(out + ":" + preset + ":32:" + std::to_string(seed));
      expected += std::string(preset) + " " + std::to_string(seed) + " maxdiff 0.0\n";
    }
  }
  const auto r = run_command(shell_quote(py) + " " + shell_quote(script) + " " + shell_quote(root_ + "/b/x.jpg") + cases +
                             " 2>&1");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(r.output, expected);
}

TEST_F(ImageCli, BadArgumentsExitTwoUnreadableFilesOne) {
  REQUIRE_TOOL();
  const std::string out = " --out " + shell_quote(dir_.file("s.pt"));
  const std::pair<std::string, const char*> usage[] = {
      {"images", "A subcommand (list, get"},
      {"images list", "ROOT is required"},
      {"images get " + shell_quote(root_) + out, "--index is required"},
      {"images get " + shell_quote(root_) + " --index 0", "--out is required"},
      {"images get " + shell_quote(root_) + " --index 3" + out, "--index 3 is out of range"},
      {"images get " + shell_quote(root_) + " --index x" + out, "expected an integer"},
      {"images get " + shell_quote(root_) + " --index 0 --transform blur" + out, "--transform"},
      {"images get " + shell_quote(root_) + " --index 0 --size 0" + out, "--size must be positive"},
      {"images get " + shell_quote(root_) + " --index 0 --transform eval --mode L" + out, "--mode L"},
  };
  for (const auto& [args, says] : usage) {
    SCOPED_TRACE(args);
    const auto r = tool(args);
    EXPECT_EQ(r.status, 2) << r.output;
    EXPECT_NE(r.output.find(says), std::string::npos) << r.output;
  }
  auto r = tool("images list " + shell_quote(dir_.file("missing")));
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("No such file or directory"), std::string::npos) << r.output;
  std::ofstream(root_ + "/a/z.jpg", std::ios::binary) << "garbage";
  r = tool("images get " + shell_quote(root_) + " --index 1" + out);
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("ImageFolder: sample 1 (" + root_ + "/a/z.jpg): cannot identify image file"),
            std::string::npos)
      << r.output;
}

}  // namespace
