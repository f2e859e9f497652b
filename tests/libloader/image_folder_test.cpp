// ImageFolder and ImageList (loader/image/image_folder.h): torchvision 0.14's classes,
// sample order and errors (tests/golden/images/folder.json, for the tree the test builds
// again here), decoding through get() / get_into(), errors naming the sample and the file,
// the registered names, and batches from worker processes.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "image_test_util.h"
#include "loader/dataloader.h"
#include "loader/generator.h"
#include "loader/image/image_folder.h"
#include "loader/samplers.h"
#include "pt_test_util.h"

namespace {

using namespace loader::testing;
using loader::image::ImageDatasetOptions;
using loader::image::ImageFolder;
using loader::image::ImageList;
using loader::image::Sample;

void write(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f << bytes;
}

// The tree of folder.json: [path, "d" | "f" | "l:TARGET"].
void build(const std::string& root, const nlohmann::json& tree) {
  std::filesystem::create_directories(root);
  for (const auto& e : tree) {
    const std::string p = root + "/" + e[0].get<std::string>();
    const std::string kind = e[1];
    if (kind == "d")
      std::filesystem::create_directories(p);
    else if (kind == "f")
      write(p, "");
    else
      ASSERT_EQ(::symlink(kind.substr(2).c_str(), p.c_str()), 0) << p;
  }
}

std::vector<std::pair<std::string, int64_t>> relative(const std::vector<Sample>& s, const std::string& root) {
  std::vector<std::pair<std::string, int64_t>> out;
  for (const auto& x : s) out.emplace_back(x.path.substr(root.size() + 1), x.target);
  return out;
}
std::vector<std::pair<std::string, int64_t>> pairs(const nlohmann::json& j) {
  std::vector<std::pair<std::string, int64_t>> out;
  for (const auto& x : j) out.emplace_back(x[0].get<std::string>(), x[1].get<int64_t>());
  return out;
}

template <class F>
std::string error_of(F&& f, std::string* type = nullptr) {
  try {
    f();
  } catch (const loader::Error& e) {
    if (type) *type = e.python_type();
    return e.what();
  }
  return "(no error)";
}

TEST(ImageFolder, ClassesAndSamplesEqualTorchvision) {
  const auto g = image_json("folder.json");
  TempDir dir;
  const std::string root = dir.file("root");
  build(root, g["tree"]);
  const ImageFolder ds(root);
  EXPECT_EQ(nlohmann::json(ds.classes()), g["classes"]);
  for (const auto& [name, idx] : g["class_to_idx"].items()) EXPECT_EQ(ds.class_to_idx().at(name), idx.get<int64_t>());
  EXPECT_EQ(relative(ds.samples(), root), pairs(g["samples"]));
  EXPECT_EQ(ds.size(), static_cast<int64_t>(g["samples"].size()));
  EXPECT_EQ(ds.targets().size(), ds.samples().size());

  // is_valid_file instead of extensions.
  const ImageFolder png(root, {}, std::nullopt, [](const std::string& p) {
    return p.size() >= 4 && (p.compare(p.size() - 4, 4, ".png") == 0 || p.compare(p.size() - 4, 4, ".bmp") == 0);
  });
  EXPECT_EQ(relative(png.samples(), root), pairs(g["samples_png_bmp"]));
  EXPECT_FALSE(png.handle().has_value());  // a function cannot travel in a handle
  EXPECT_EQ(error_of([&] { ImageFolder(root, {}, std::vector<std::string>{".png"}, [](const std::string&) { return true; }); }),
            "Both extensions and is_valid_file cannot be None or not None at the same time");
}

TEST(ImageFolder, EmptyClassesAreRefusedAsTorchvisionRefusesThem) {
  const auto g = image_json("folder.json");
  TempDir dir;
  build(dir.file("empty"), g["empty_tree"]);
  std::string type;
  EXPECT_EQ(error_of([&] { ImageFolder(dir.file("empty")); }, &type), g["empty_class_error"]["message"].get<std::string>());
  EXPECT_EQ(type, g["empty_class_error"]["type"].get<std::string>());
  build(dir.file("root"), g["tree"]);
  EXPECT_EQ(error_of([&] {
              ImageFolder(dir.file("root"), {}, std::nullopt, [](const std::string& p) {
                return p.size() >= 4 && p.compare(p.size() - 4, 4, ".png") == 0;
              });
            }),
            g["empty_class_error_is_valid_file"]["message"].get<std::string>());
  const std::string noclasses = dir.file("noclasses");
  std::filesystem::create_directories(noclasses);
  write(noclasses + "/x.jpg", "");
  std::string want = g["no_class_error"]["message"];
  want.replace(want.find("{root}"), 6, noclasses);
  EXPECT_EQ(error_of([&] { ImageFolder{noclasses}; }, &type), want);
  EXPECT_EQ(type, "FileNotFoundError");
  EXPECT_NE(error_of([&] { ImageFolder{dir.file("missing")}; }, &type).find("No such file or directory"), std::string::npos);
  EXPECT_EQ(type, "FileNotFoundError");
}

// A folder of real images (copies of the golden files) and a few bad ones.
class ImageFolderFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = dir_.file("data");
    const std::pair<const char*, const char*> files[] = {
        {"cat/a.jpg", "rgb420.jpg"},   {"cat/b.png", "rgb8.png"},     {"cat/c.jpg", "gray.jpg"},
        {"dog/d.jpg", "rgb420_big.jpg"}, {"dog/e.png", "palette8.png"}, {"dog/f.jpg", "cmyk.jpg"},
        {"dog/g.jpg", "progressive.jpg"}, {"dog/h.png", "rgba16.png"},
    };
    for (const auto& [to, from] : files) {
      std::filesystem::create_directories(std::filesystem::path(root_ + "/" + to).parent_path());
      write(root_ + "/" + to, image_bytes(from));
    }
  }
  TempDir dir_;
  std::string root_;
};

TEST_F(ImageFolderFiles, GetGivesTheImageAndTheClassIndex) {
  const ImageFolder plain(root_);
  ASSERT_EQ(plain.size(), 8);
  ImageFolder ds(root_);
  const loader::Value s = ds.get(3);  // dog/d.jpg
  ASSERT_TRUE(s.is_tuple());
  EXPECT_EQ(s[1].to_int(), 1);
  const loader::Tensor& img = s[0].to_tensor();
  EXPECT_EQ(img.dtype(), loader::DType::UInt8);
  EXPECT_EQ(img.sizes(), (loader::Dims{3, 61, 97}));
  const auto want = loader::image::decode_file(image_file("rgb420_big.jpg"));
  EXPECT_EQ(chw_to_hwc(img), std::vector<uint8_t>(want.data(), want.data() + want.bytes()));
  EXPECT_EQ(ds.get(-1)[1].to_int(), 1);
  EXPECT_THROW(ds.get(8), loader::IndexError);
  EXPECT_FALSE(ds.sample_spec().has_value());  // sizes differ without a transform

  ImageDatasetOptions o;
  o.mode = loader::image::ColorMode::L;
  o.target_transform = [](int64_t t) { return loader::Value("class" + std::to_string(t)); };
  ImageFolder gray(root_, o);
  const loader::Value g = gray.get(0);
  EXPECT_EQ(g[0].to_tensor().sizes(), (loader::Dims{1, 21, 33}));
  EXPECT_EQ(g[1].to_string(), "class0");
}

TEST_F(ImageFolderFiles, ErrorsNameTheSampleAndTheFile) {
  write(root_ + "/cat/bad.jpg", "not a jpeg");
  write(root_ + "/cat/empty.png", "");
  const std::string big = image_bytes("rgb420_big.jpg");
  write(root_ + "/dog/cut.jpg", big.substr(0, big.size() / 2));
  write(root_ + "/dog/z.webp", std::string("RIFF\0\0\0\0WEBPVP8 ", 16));
  ImageFolder ds(root_);
  auto index_of = [&](const std::string& rel) {
    for (size_t i = 0; i < ds.samples().size(); ++i)
      if (ds.samples()[i].path == root_ + "/" + rel) return static_cast<int64_t>(i);
    ADD_FAILURE() << rel << " not in the dataset";
    return int64_t{0};
  };
  const std::pair<const char*, const char*> cases[] = {
      {"cat/bad.jpg", "cannot identify image file: neither JPEG nor PNG"},
      {"cat/empty.png", "cannot identify image file: the file is empty"},
      {"dog/cut.jpg", "image file is truncated"},
      {"dog/z.webp", "WEBP images are not supported"},
  };
  for (const auto& [rel, says] : cases) {
    const int64_t i = index_of(rel);
    const std::string msg = error_of([&] { ds.get(i); });
    const std::string prefix = "ImageFolder: sample " + std::to_string(i) + " (" + root_ + "/" + rel + "): ";
    EXPECT_EQ(msg.rfind(prefix, 0), 0u) << msg;
    EXPECT_NE(msg.find(says), std::string::npos) << msg;
  }
  // A file removed after the scan.
  const int64_t a = index_of("cat/a.jpg");
  std::filesystem::remove(root_ + "/cat/a.jpg");
  std::string type;
  const std::string msg = error_of([&] { ds.get(a); }, &type);
  EXPECT_EQ(type, "FileNotFoundError");
  EXPECT_NE(msg.find("ImageFolder: sample " + std::to_string(a) + ": " + root_ + "/cat/a.jpg: no such file"),
            std::string::npos)
      << msg;
}

TEST_F(ImageFolderFiles, GetIntoEqualsGet) {
  for (const char* preset : {"train", "eval"}) {
    SCOPED_TRACE(preset);
    ImageDatasetOptions o;
    o.transform = loader::image::Compose::preset(preset, 16);
    ImageFolder ds(root_, o);
    const auto spec = ds.sample_spec();
    ASSERT_TRUE(spec.has_value());
    EXPECT_EQ((*spec)[0].to_tensor().sizes(), (loader::Dims{3, 16, 16}));
    EXPECT_EQ((*spec)[0].to_tensor().dtype(), loader::DType::Float32);
    loader::manual_seed(11);
    std::vector<loader::Value> got;
    for (int64_t i = 0; i < ds.size(); ++i) got.push_back(ds.get(i));
    loader::manual_seed(11);
    for (int64_t i = 0; i < ds.size(); ++i) {
      loader::Tensor img = loader::Tensor::empty({3, 16, 16}, loader::DType::Float32);
      int64_t label = -1;
      void* leaves[2] = {img.data_ptr(), &label};
      ds.get_into(i, leaves);
      EXPECT_TRUE(img.bitwise_equal(got[static_cast<size_t>(i)][0].to_tensor())) << "sample " << i;
      EXPECT_EQ(label, got[static_cast<size_t>(i)][1].to_int());
    }
  }
}

TEST_F(ImageFolderFiles, RegisteredNamesAndHandles) {
  const loader::Value steps = loader::Value::list({loader::Value::dict({{"name", "Resize"}, {"size", 12}}),
                                                   loader::Value::dict({{"name", "CenterCrop"}, {"size", 12}}),
                                                   loader::Value("ToTensor")});
  auto ds = loader::make_dataset({"image_folder", loader::Value::dict({{"root", root_},
                                                                       {"transform", steps},
                                                                       {"mode", "L"},
                                                                       {"extensions", loader::Value::list({".png"})}})});
  ASSERT_EQ(ds->size(), 3);  // b.png, e.png, h.png
  EXPECT_EQ(ds->get(0)[0].to_tensor().sizes(), (loader::Dims{1, 12, 12}));
  EXPECT_EQ((*ds->sample_spec())[0].to_tensor().sizes(), (loader::Dims{1, 12, 12}));
  // The C++ constructor records a handle that rebuilds the same dataset.
  ImageDatasetOptions o;
  o.transform = loader::image::Compose::preset("train", 10);
  o.decode_scaling = true;
  const ImageFolder direct(root_, o);
  ASSERT_TRUE(direct.handle().has_value());
  auto again = loader::make_dataset(*direct.handle());
  auto* folder = dynamic_cast<ImageFolder*>(again.get());
  ASSERT_NE(folder, nullptr);
  EXPECT_EQ(folder->samples(), direct.samples());
  EXPECT_EQ(folder->options().transform.to_value(), o.transform.to_value());
  EXPECT_TRUE(folder->options().decode_scaling);

  const std::pair<loader::Value, const char*> bad[] = {
      {loader::Value::dict({{"transform", "eval"}}), "image_folder needs \"root\""},
      {loader::Value::dict({{"root", root_}, {"colour", "L"}}), "unknown parameter 'colour' for image_folder"},
      {loader::Value::dict({{"root", root_}, {"transform", "augment"}}), "image_folder: unknown transform preset"},
      {loader::Value::dict({{"root", root_}, {"mode", "CMYK"}}), "unknown image mode 'CMYK'"},
      {loader::Value::dict({{"list", "x.txt"}}), "unknown parameter 'list' for image_folder"},
      {loader::Value::dict({{"root", root_}, {"transform", "eval"}, {"mode", "L"}}),
       "ImageFolder: mode L gives 1 channel, and Normalize (step 3) has 3 mean/std values"},
  };
  for (const auto& [params, says] : bad) {
    const std::string msg = error_of([&] { loader::make_dataset({"image_folder", params}); });
    EXPECT_NE(msg.find(says), std::string::npos) << msg;
  }
}

// Batches from 2 worker processes (datasets rebuilt from the handle):
//   eval draws nothing: they equal the batches of the main process;
//   train, PyTorch's per-worker seeding: worker w draws from a generator seeded base_seed + w
//     (base_seed the loader generator's first int64), running on across the batches it gets
//     round-robin: the batches equal those rebuilt so in-process;
//   train, per-task seeding: they equal the batches of the main process.
TEST_F(ImageFolderFiles, WorkerProcessesDeliverTheBatchesTorchWould) {
  auto batches = [&](const std::shared_ptr<loader::Dataset>& ds, int workers, loader::WorkerSeeding seeding) {
    loader::DataLoaderOptions opt;
    opt.batch_size = 3;
    opt.num_workers = workers;
    opt.sampler = std::make_shared<loader::RandomSampler>(ds, std::make_shared<loader::Generator>(7));
    opt.generator = std::make_shared<loader::Generator>(5);
    opt.worker_seeding = seeding;
    loader::DataLoader dl(ds, opt);
    std::vector<loader::Value> out;
    for (loader::Value& b : dl) out.push_back(b.map_tensors([](const loader::Tensor& t) { return t.clone(); }));
    return out;
  };
  auto same = [](const std::vector<loader::Value>& a, const std::vector<loader::Value>& b) {
    ASSERT_EQ(a.size(), 3u);
    ASSERT_EQ(b.size(), a.size());
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i][0].to_tensor().sizes(), (loader::Dims{i < 2 ? 3 : 2, 3, 16, 16}));
      EXPECT_TRUE(a[i][0].to_tensor().bitwise_equal(b[i][0].to_tensor())) << "batch " << i;
      EXPECT_TRUE(a[i][1].to_tensor().bitwise_equal(b[i][1].to_tensor())) << "batch " << i;
    }
  };
  const auto params = [&](const char* preset) {
    return loader::Value::dict({{"root", root_}, {"transform", preset}, {"size", 16}});
  };
  auto eval = loader::make_dataset({"image_folder", params("eval")});
  same(batches(eval, 2, loader::WorkerSeeding::PerWorker), batches(eval, 0, loader::WorkerSeeding::PerWorker));

  auto train = loader::make_dataset({"image_folder", params("train")});
  same(batches(train, 2, loader::WorkerSeeding::PerTask), batches(train, 0, loader::WorkerSeeding::PerTask));

  const auto two = batches(train, 2, loader::WorkerSeeding::PerWorker);
  // Rebuilt in-process: the sampler's order, then each batch from its worker's generator.
  loader::RandomSampler order(train, std::make_shared<loader::Generator>(7));
  std::vector<int64_t> indices;
  auto cursor = order.iter();
  while (auto i = cursor->next()) indices.push_back(*i);
  const uint64_t base_seed = static_cast<uint64_t>(loader::Generator(5).random_int64());
  loader::Generator worker_gen[2] = {loader::Generator(base_seed), loader::Generator(base_seed + 1)};
  std::vector<loader::Value> rebuilt;
  for (size_t b = 0; b * 3 < indices.size(); ++b) {
    loader::DefaultGeneratorScope scope(worker_gen[b % 2]);
    std::vector<loader::Value> samples;
    for (size_t k = b * 3; k < std::min(indices.size(), b * 3 + 3); ++k) samples.push_back(train->get(indices[k]));
    std::vector<loader::Tensor> imgs, labels;
    for (auto& s : samples) imgs.push_back(s[0].to_tensor());
    loader::Tensor x = loader::Tensor::empty({static_cast<int64_t>(imgs.size()), 3, 16, 16}, loader::DType::Float32);
    loader::Tensor y = loader::Tensor::empty({static_cast<int64_t>(imgs.size())}, loader::DType::Int64);
    for (size_t r = 0; r < imgs.size(); ++r) {
      std::memcpy(static_cast<float*>(x.data_ptr()) + r * 3 * 16 * 16, imgs[r].data_ptr(), imgs[r].nbytes());
      static_cast<int64_t*>(y.data_ptr())[r] = samples[r][1].to_int();
    }
    rebuilt.push_back(loader::Value::list({x, y}));
  }
  same(two, rebuilt);
}

TEST_F(ImageFolderFiles, ImageListReadsItsLines) {
  const std::string list = dir_.file("list.csv");
  std::filesystem::create_directories(dir_.file("data/odd, name"));
  write(dir_.file("data/odd, name/q\"x.jpg"), image_bytes("rgb444.jpg"));
  write(list,
        "path,label\n"
        "# a comment\n"
        "\n"
        "data/cat/a.jpg,4\n"
        "  data/dog/d.jpg , 7 \r\n"
        "\"data/odd, name/q\"\"x.jpg\",2\n"
        "data/cat/b.png 3\n" +
            root_ + "/dog/e.png,0\n");
  ImageList ds(list);
  const std::vector<Sample> want = {{dir_.path() + "/data/cat/a.jpg", 4},
                                    {dir_.path() + "/data/dog/d.jpg", 7},
                                    {dir_.path() + "/data/odd, name/q\"x.jpg", 2},
                                    {dir_.path() + "/data/cat/b.png", 3},
                                    {root_ + "/dog/e.png", 0}};
  EXPECT_EQ(ds.samples(), want);
  EXPECT_EQ(ds.get(2)[0].to_tensor().sizes(), (loader::Dims{3, 21, 33}));
  EXPECT_EQ(ds.get(2)[1].to_int(), 2);
  // By name, with another root for the relative paths.
  write(dir_.file("rel.txt"), "cat/a.jpg,1\n");
  auto byname = loader::make_dataset({"image_list", loader::Value::dict({{"list", dir_.file("rel.txt")}, {"root", root_}})});
  EXPECT_EQ(byname->get(0)[1].to_int(), 1);
  EXPECT_EQ(byname->get(0)[0].to_tensor().sizes(), (loader::Dims{3, 21, 33}));

  const std::pair<const char*, const char*> bad[] = {
      {"a.jpg,x\n", "line 1: the label 'x' is not an integer >= 0"},
      {"# c\na.jpg,1\nb.jpg\n", "line 3: no label"},
      {"\"a.jpg,1\n", "line 1: the quoted path has no closing quote"},
      {"a.jpg,-1\n", "line 1: the label '-1' is not an integer >= 0"},
  };
  for (const auto& [text, says] : bad) {
    write(dir_.file("bad.txt"), text);
    const std::string msg = error_of([&] { ImageList{dir_.file("bad.txt")}; });
    EXPECT_NE(msg.find("ImageList: " + dir_.file("bad.txt") + " " + says), std::string::npos) << msg;
  }
  std::string type;
  error_of([&] { ImageList{dir_.file("none.txt")}; }, &type);
  EXPECT_EQ(type, "FileNotFoundError");
}

TEST(ImageFolder, ExtensionsAreMatchedAsTorchvisionMatchesThem) {
  using loader::image::has_file_allowed_extension;
  const auto& ext = loader::image::img_extensions();
  EXPECT_EQ(ext.size(), 9u);
  EXPECT_TRUE(has_file_allowed_extension("/x/A.JPG", ext));
  EXPECT_TRUE(has_file_allowed_extension("b.TiFf", ext));
  EXPECT_TRUE(has_file_allowed_extension(".jpg", ext));
  EXPECT_FALSE(has_file_allowed_extension("x.jpg.bak", ext));
  EXPECT_FALSE(has_file_allowed_extension("jpg", ext));
  EXPECT_FALSE(has_file_allowed_extension("x.png", {".PNG"}));  // torchvision lower-cases the name only
}

}  // namespace
