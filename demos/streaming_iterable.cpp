// An iterable (streaming) dataset split across worker processes.
//
// The stream reads Fashion-MNIST records one at a time straight out of the
// gzip-compressed IDX files with loader::IdxReader (loader/idx.h): it never holds the
// data set in memory.  Each worker
// process gets its own copy of the dataset and, through get_worker_info(), streams
// only its share: a contiguous range of records, as in the IterableDataset
// docstring's first example.  Without that split every worker would stream every
// record and each would arrive num_workers times.
//
//   build/demos/streaming_iterable [--workers 2] [--batch-size 500] [--split test|train]
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "loader/dataloader.h"
#include "loader/error.h"
#include "loader/fashion_mnist.h"
#include "loader/idx.h"
#include "loader/worker_main.h"
#include "loader/worker_info.h"

namespace {

class FashionStream final : public loader::IterableDataset {
 public:
  FashionStream(std::string root, std::string prefix) : root_(std::move(root)), prefix_(std::move(prefix)) {
    count_ = loader::IdxReader(labels_path(), 1).count();
  }

  std::optional<int64_t> size() const override { return count_; }

  std::unique_ptr<loader::Cursor<loader::Value>> iter() override {
    // This copy's share: all records in the main process; a contiguous range in a worker.
    int64_t start = 0, end = count_, worker = -1;
    if (const loader::WorkerInfo* info = loader::get_worker_info()) {
      const int64_t per_worker = (count_ + info->num_workers - 1) / info->num_workers;
      start = std::min(count_, info->id * per_worker);
      end = std::min(count_, start + per_worker);
      worker = info->id;
    }
    auto images = std::make_shared<loader::IdxReader>(root_ + "/" + prefix_ + "-images-idx3-ubyte.gz", 3);
    auto labels = std::make_shared<loader::IdxReader>(labels_path(), 1);
    images->seek(start);
    labels->seek(start);
    return loader::make_cursor<loader::Value>([=, i = start]() mutable -> std::optional<loader::Value> {
      if (i >= end) return std::nullopt;
      unsigned char pixels[784], label;
      images->read(pixels, 1);
      labels->read(&label, 1);
      loader::Tensor image = loader::Tensor::empty({1, 28, 28}, loader::DType::Float32);
      float* dst = image.data<float>();
      for (int k = 0; k < 784; ++k) dst[k] = static_cast<float>(pixels[k]) / 255.0f;
      return loader::Value::dict({{"image", image}, {"label", int64_t{label}}, {"record", i++}, {"worker", worker}});
    });
  }

 private:
  std::string labels_path() const { return root_ + "/" + prefix_ + "-labels-idx1-ubyte.gz"; }
  std::string root_, prefix_;
  int64_t count_ = 0;
};

LOADER_REGISTER_ITERABLE_DATASET("fashion_stream", [](const loader::Value& p) {
  return std::make_shared<FashionStream>(p.get("root", loader::FashionMNIST::kDefaultRoot).to_string(),
                                         p.at("split").to_string() == "train" ? "train" : "t10k");
});

}  // namespace

int main(int argc, char** argv) {
  if (auto rc = loader::runtime::run_worker_if_requested(argc, argv)) return *rc;
  int workers = 2;
  int64_t batch_size = 500;
  std::string split = "test";
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--workers") workers = std::atoi(argv[i + 1]);
    else if (a == "--batch-size") batch_size = std::atoll(argv[i + 1]);
    else if (a == "--split") split = argv[i + 1];
    else {
      std::fprintf(stderr, "usage: streaming_iterable [--workers W] [--batch-size B] [--split test|train]\n");
      return 2;
    }
  }
  try {
    auto stream = loader::make_iterable_dataset({"fashion_stream", loader::Value::dict({{"split", split}})});
    loader::DataLoaderOptions opts;
    opts.batch_size = batch_size;
    opts.num_workers = workers;
    loader::DataLoader dl(stream, opts);
    std::printf("streaming %lld Fashion-MNIST %s records from the .gz files, %d workers, batches of %lld "
                "(len(loader) = %lld)\n",
                static_cast<long long>(*stream->size()), split.c_str(), workers, static_cast<long long>(batch_size),
                static_cast<long long>(dl.size()));

    auto who = [](int64_t w) { return w < 0 ? std::string("the main process") : "worker " + std::to_string(w); };
    std::map<int64_t, std::pair<int64_t, int64_t>> share;  // worker -> (first, last) record
    std::map<int64_t, int64_t> per_worker;
    std::vector<int> seen(static_cast<size_t>(*stream->size()), 0);
    int64_t batches = 0;
    for (loader::Value& batch : dl) {
      // default_collate of dicts: a dict of batched tensors.
      auto records = batch.at("record").to_tensor().to_int64_vector();
      auto from = batch.at("worker").to_tensor().to_int64_vector();
      if (batches < 6 || records.size() < static_cast<size_t>(batch_size))
        std::printf("  batch %2lld: %zu samples from %s, records %lld..%lld, images %s\n",
                    static_cast<long long>(batches), records.size(), who(from.front()).c_str(),
                    static_cast<long long>(records.front()), static_cast<long long>(records.back()),
                    batch.at("image").to_tensor().sizes().str().c_str());
      else if (batches == 6)
        std::printf("  ...\n");
      for (size_t k = 0; k < records.size(); ++k) {
        ++seen[static_cast<size_t>(records[k])];
        ++per_worker[from[k]];
        auto it = share.try_emplace(from[k], records[k], records[k]).first;
        it->second.second = records[k];
      }
      ++batches;
    }
    for (const auto& [w, n] : per_worker)
      std::printf("%s streamed %lld records [%lld, %lld]\n",
                  who(w).c_str(), static_cast<long long>(n),
                  static_cast<long long>(share[w].first),
                  static_cast<long long>(share[w].second));
    int64_t missing = 0, repeated = 0;
    for (int c : seen) missing += c == 0, repeated += c > 1;
    std::printf("%lld batches; every record exactly once: %s (%lld missing, %lld repeated)\n",
                static_cast<long long>(batches), missing == 0 && repeated == 0 ? "yes" : "NO",
                static_cast<long long>(missing), static_cast<long long>(repeated));
    return missing == 0 && repeated == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "streaming_iterable: %s\n", e.what());
    return 1;
  }
}
