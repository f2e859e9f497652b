// A class-balanced batch sampler written by the user, over imbalanced data.
//
// PyTorch users with imbalanced classes often write an "equi-batch" sampler: every
// batch cycles through the classes (c0, c1, ..., c9, c0, c1, ...), each class drawing
// from its own shuffled pool, reshuffled when it runs out, so rare classes are
// oversampled and every batch is balanced.  Here it is a BatchSamplerBase subclass
// handed to DataLoaderOptions::batch_sampler; the batches are loaded by worker
// processes like any others.
//
// The data: Fashion-MNIST's training set made imbalanced by keeping (c + 1) * 10% of
// class c (600 T-shirts ... 6000 ankle boots).  The demo prints the class counts of
// the first batches and of a whole epoch, shuffled plainly and balanced.
//
//   build/demos/class_balanced_sampler [--workers 2] [--batch-size 100]
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "loader/dataloader.h"
#include "loader/fashion_mnist.h"
#include "loader/generator.h"
#include "loader/runtime/worker_main.h"
#include "loader/samplers.h"

namespace {

/// Batches of `batch_size` indices that cycle through the classes.  One pass yields
/// `num_batches` batches (default: as many as the indices fill).
class ClassBalancedBatchSampler final : public loader::BatchSamplerBase {
 public:
  ClassBalancedBatchSampler(const std::vector<int64_t>& indices, const std::vector<int64_t>& labels,
                            int64_t num_classes, int64_t batch_size, std::shared_ptr<loader::Generator> generator)
      : pools_(static_cast<size_t>(num_classes)), batch_size_(batch_size), generator_(std::move(generator)),
        num_batches_(static_cast<int64_t>(indices.size()) / batch_size) {
    for (size_t k = 0; k < indices.size(); ++k) pools_[static_cast<size_t>(labels[k])].push_back(indices[k]);
    for (const auto& p : pools_)
      if (p.empty()) throw loader::ValueError("ClassBalancedBatchSampler: a class has no samples");
  }

  std::unique_ptr<loader::Cursor<loader::IndexBatch>> iter() override {
    struct Pass {
      std::vector<std::vector<int64_t>> order;  // each class's pool, shuffled
      std::vector<size_t> next;                 // position in each pool
      size_t cls = 0;                           // class of the next sample
      int64_t batches_left;
    };
    auto pass = std::make_shared<Pass>();
    pass->order.resize(pools_.size());
    pass->next.assign(pools_.size(), 0);
    pass->batches_left = num_batches_;
    return loader::make_cursor<loader::IndexBatch>([this, pass]() -> std::optional<loader::IndexBatch> {
      if (pass->batches_left-- <= 0) return std::nullopt;
      loader::IndexBatch batch;
      batch.reserve(static_cast<size_t>(batch_size_));
      while (static_cast<int64_t>(batch.size()) < batch_size_) {
        const size_t c = pass->cls;
        pass->cls = (pass->cls + 1) % pools_.size();
        if (pass->next[c] == pass->order[c].size()) {  // pool used up (or first use): reshuffle
          pass->order[c].clear();
          for (int64_t i : loader::randperm(static_cast<int64_t>(pools_[c].size()), *generator_))
            pass->order[c].push_back(pools_[c][static_cast<size_t>(i)]);
          pass->next[c] = 0;
        }
        batch.push_back(pass->order[c][pass->next[c]++]);
      }
      return batch;
    });
  }

  std::optional<int64_t> size() const override { return num_batches_; }

 private:
  std::vector<std::vector<int64_t>> pools_;
  int64_t batch_size_;
  std::shared_ptr<loader::Generator> generator_;
  int64_t num_batches_;
};

std::string counts_text(const std::vector<int64_t>& c) {
  std::string s;
  for (int64_t n : c) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "%5lld", static_cast<long long>(n));
    s += buf;
  }
  return s;
}

// One epoch: class counts of the first three batches and of the whole epoch.
void show(const char* title, loader::DataLoader& dl) {
  std::printf("%s, %lld batches:\n", title, static_cast<long long>(dl.size()));
  std::vector<int64_t> total(10, 0);
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
    if (b < 3) std::printf("  batch %-8lld%s\n", static_cast<long long>(b), counts_text(counts).c_str());
    ++b;
  }
  std::printf("  one epoch     %s\n", counts_text(total).c_str());
}

}  // namespace

int main(int argc, char** argv) {
  if (auto rc = loader::runtime::run_worker_if_requested(argc, argv)) return *rc;
  int workers = 2;
  int64_t batch_size = 100;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--workers") workers = std::atoi(argv[i + 1]);
    else if (a == "--batch-size") batch_size = std::atoll(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: class_balanced_sampler [--workers W] [--batch-size B]\n");
      return 2;
    }
  }
  try {
    loader::register_fashion_mnist();
    auto ds = loader::make_dataset({"fashion_mnist", loader::Value::dict({{"train", true}})});
    const auto& fm = static_cast<const loader::FashionMNIST&>(*ds);

    // Keep (c + 1) * 10% of class c: the first samples of each class, in dataset order.
    std::vector<int64_t> kept, kept_labels, have(10, 0), keep(10);
    for (int64_t c = 0; c < 10; ++c) keep[static_cast<size_t>(c)] = 6000 * (c + 1) / 10;
    for (int64_t i = 0; i < fm.size(); ++i) {
      const auto c = static_cast<size_t>(fm.label(i));
      if (have[c]++ < keep[c]) {
        kept.push_back(i);
        kept_labels.push_back(static_cast<int64_t>(c));
      }
    }
    std::printf("imbalanced Fashion-MNIST: %zu of %lld training images, %d workers\n", kept.size(),
                static_cast<long long>(fm.size()), workers);
    std::printf("  class         ");
    for (int c = 0; c < 10; ++c) std::printf("%5d", c);
    std::printf("\n  images        %s\n", counts_text(keep).c_str());

    loader::DataLoaderOptions plain;
    plain.batch_size = batch_size;
    plain.num_workers = workers;
    plain.sampler = std::make_shared<loader::SubsetRandomSampler>(kept, std::make_shared<loader::Generator>(0));
    loader::DataLoader shuffled(ds, plain);
    show("shuffled (SubsetRandomSampler)", shuffled);

    loader::DataLoaderOptions balanced;
    balanced.num_workers = workers;
    balanced.batch_sampler = std::make_shared<ClassBalancedBatchSampler>(kept, kept_labels, 10, batch_size,
                                                                         std::make_shared<loader::Generator>(0));
    loader::DataLoader equi(ds, balanced);
    show("class-balanced (ClassBalancedBatchSampler)", equi);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "class_balanced_sampler: %s\n", e.what());
    return 1;
  }
}
