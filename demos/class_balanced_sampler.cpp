// Class-balanced batches over imbalanced, multi-label data with the library's
// EquiBatchSampler (the samplers document's DistributedEquiBatchSampler).
//
// The data: Fashion-MNIST's training set made imbalanced by keeping (c + 1) * 10% of
// class c (600 T-shirts ... 6000 ankle boots), with labels derived from the classes so that
// an image can carry several: its class c (0..9) and, for tops and shoes, a group label,
// 10 "top" (T-shirt/top, Pullover, Coat, Shirt) or 11 "footwear" (Sandal, Sneaker, Ankle
// boot).  The sampler sees 12 labels; each epoch it draws a pool of --balanced-coef images
// per label (rare classes oversampled, common ones subsampled) and fills every batch from
// one label, the labels taking turns, so each label gets the same number of batches.
// The batches are loaded by worker processes like any others.
//
// The demo prints the class counts of the first batches and of a whole epoch, shuffled
// plainly and balanced, and how many batches each label got.
//
//   build/demos/class_balanced_sampler [--workers 2] [--batch-size 64] [--balanced-coef 640] [--seed 0]
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "loader/dataloader.h"
#include "loader/datasets.h"
#include "loader/equibatch_sampler.h"
#include "loader/fashion_mnist.h"
#include "loader/generator.h"
#include "loader/worker_main.h"
#include "loader/samplers.h"

namespace {

constexpr int64_t kTop = 10, kFootwear = 11;

/// The labels of an image of class c: c, plus its group when it has one.
std::vector<int64_t> labels_of(int64_t c) {
  if (c == 0 || c == 2 || c == 4 || c == 6) return {c, kTop};
  if (c == 5 || c == 7 || c == 9) return {c, kFootwear};
  return {c};
}

/// The one label every image of a batch carries (its class, else its group), or -1.
int64_t label_of_batch(const std::vector<int64_t>& classes) {
  for (int64_t candidate : {classes.at(0), labels_of(classes.at(0)).back()}) {
    bool all = true;
    for (int64_t c : classes) {
      const auto l = labels_of(c);
      all = all && (l.front() == candidate || l.back() == candidate);
    }
    if (all) return candidate;
  }
  return -1;
}

std::string label_name(int64_t label) {
  if (label == kTop) return "top (group)";
  if (label == kFootwear) return "footwear (group)";
  return loader::FashionMNIST::classes()[static_cast<size_t>(label)];
}

std::string counts_text(const std::vector<int64_t>& c) {
  std::string s;
  for (int64_t n : c) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "%5lld", static_cast<long long>(n));
    s += buf;
  }
  return s;
}

// One epoch: class counts of the first three batches and of the whole epoch.  With a
// sampler, each batch is also named by the label it was drawn for.
void show(const char* title, loader::DataLoader& dl, const loader::EquiBatchSampler* sampler = nullptr) {
  std::printf("%s, %lld batches:\n", title, static_cast<long long>(dl.size()));
  std::vector<int64_t> total(10, 0);
  std::map<int64_t, int64_t> per_label;  // batches per label, judged from their images' classes
  int64_t b = 0;
  for (loader::Value& batch : dl) {
    std::vector<int64_t> counts(10, 0);
    const auto labels = batch[1].to_tensor().to_int64_vector();
    for (int64_t label : labels) ++counts[static_cast<size_t>(label)];
    if (b == 0) {
      std::printf("  labels of batch 0:");
      for (size_t k = 0; k < 15 && k < labels.size(); ++k) std::printf(" %lld", static_cast<long long>(labels[k]));
      std::printf(" ...\n");
    }
    for (size_t c = 0; c < 10; ++c) total[c] += counts[c];
    ++per_label[label_of_batch(labels)];
    if (b < 3) {
      std::printf("  batch %-8lld%s", static_cast<long long>(b), counts_text(counts).c_str());
      if (sampler) {
        const int64_t label = sampler->classes()[static_cast<size_t>(b % sampler->num_classes())];
        std::printf("   <- label %lld, %s", static_cast<long long>(label), label_name(label).c_str());
      }
      std::printf("\n");
    }
    ++b;
  }
  std::printf("  one epoch     %s\n", counts_text(total).c_str());
  std::printf("  batches whose images all share a label:");
  for (const auto& [label, n] : per_label)
    if (label >= 0) std::printf(" %lld:%lld", static_cast<long long>(label), static_cast<long long>(n));
  std::printf("  (mixed: %lld)\n", static_cast<long long>(per_label.count(-1) ? per_label[-1] : 0));
}

}  // namespace

int main(int argc, char** argv) {
  if (auto rc = loader::runtime::run_worker_if_requested(argc, argv)) return *rc;
  int workers = 2;
  int64_t batch_size = 64, balanced_coef = 640;
  uint64_t seed = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--workers") workers = std::atoi(argv[i + 1]);
    else if (a == "--batch-size") batch_size = std::atoll(argv[i + 1]);
    else if (a == "--balanced-coef") balanced_coef = std::atoll(argv[i + 1]);
    else if (a == "--seed") seed = std::strtoull(argv[i + 1], nullptr, 10);
    else {
      std::fprintf(stderr,
                   "usage: class_balanced_sampler [--workers W] [--batch-size B] [--balanced-coef C] [--seed S]\n");
      return 2;
    }
  }
  if ((argc - 1) % 2 != 0) {
    std::fprintf(stderr, "usage: class_balanced_sampler [--workers W] [--batch-size B] [--balanced-coef C] [--seed S]\n");
    return 2;
  }
  try {
    loader::register_fashion_mnist();
    loader::register_builtin_datasets();  // "subset", so that worker processes can rebuild it
    auto full = loader::make_dataset({"fashion_mnist", loader::Value::dict({{"train", true}})});
    const auto& fm = static_cast<const loader::FashionMNIST&>(*full);

    // Keep (c + 1) * 10% of class c: the first samples of each class, in dataset order.
    std::vector<int64_t> kept, have(10, 0), keep(10);
    std::vector<std::vector<int64_t>> idx2labels;  // per index of the subset
    for (int64_t c = 0; c < 10; ++c) keep[static_cast<size_t>(c)] = 6000 * (c + 1) / 10;
    for (int64_t i = 0; i < fm.size(); ++i) {
      const int64_t c = fm.label(i);
      if (have[static_cast<size_t>(c)]++ < keep[static_cast<size_t>(c)]) {
        kept.push_back(i);
        idx2labels.push_back(labels_of(c));
      }
    }
    auto ds = std::make_shared<loader::Subset>(full, kept);
    std::printf("imbalanced Fashion-MNIST: %zu of %lld training images, %d workers\n", kept.size(),
                static_cast<long long>(fm.size()), workers);
    std::printf("  class         ");
    for (int c = 0; c < 10; ++c) std::printf("%5d", c);
    std::printf("\n  images        %s\n", counts_text(keep).c_str());

    loader::DataLoaderOptions plain;
    plain.batch_size = batch_size;
    plain.num_workers = workers;
    plain.shuffle = true;
    plain.generator = std::make_shared<loader::Generator>(seed);
    loader::DataLoader shuffled(ds, plain);
    show("shuffled (shuffle=true)", shuffled);

    loader::EquiBatchSamplerOptions eo;
    eo.balanced_coef = balanced_coef;
    eo.seed = seed;
    auto sampler = std::make_shared<loader::EquiBatchSampler>(idx2labels, batch_size, eo);
    loader::DataLoaderOptions balanced;
    balanced.num_workers = workers;
    balanced.batch_sampler = sampler;
    loader::DataLoader equi(ds, balanced);
    std::printf("\nEquiBatchSampler: %lld labels (10 classes + 2 groups), pools of %lld per label, batch_size %lld\n",
                static_cast<long long>(sampler->num_classes()), static_cast<long long>(balanced_coef),
                static_cast<long long>(batch_size));
    show("class-balanced (EquiBatchSampler)", equi, sampler.get());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "class_balanced_sampler: %s\n", e.what());
    return 1;
  }
}
