// Trains a torch::nn model with a torch::optim optimizer on the real Fashion-MNIST data,
// fed by the loader (shuffling, worker processes, shared-memory batches handed to
// libtorch without a copy through loader/torch.h), and writes a checkpoint that
// Python's PyTorch loads.
//
//   build/demos/fashion_mnist_libtorch --epochs 10 --workers 2 --out fashion_libtorch.pt
//   /usr/bin/python3 demos/check_libtorch_checkpoint.py fashion_libtorch.pt --expect <test_accuracy>
//
// Built only when libtorch is found (LOADER_WITH_TORCH; Debian: libtorch-dev).
//
// The model is torch::nn::Sequential(Flatten, Linear(784, 256), ReLU, Linear(256, 128),
// ReLU, Linear(128, 10)) (--hidden changes the hidden sizes), on images scaled to
// [0, 1] (pixel / 255, as torchvision's ToTensor), initialised by libtorch after
// torch::manual_seed(seed), trained with torch::optim::Adam (lr 1e-3, cosine decay to 0
// over all steps, set per batch) on mini-batches of 128 with cross-entropy loss.
// 10 epochs reach about 0.89 test accuracy.
//
// Each batch is [float32[B, 1, 28, 28], int64[B]] in a worker's shared-memory slab;
// loader::to_torch_list(batch) makes torch tensors over those very bytes (the program
// checks, and reports as "zero_copy", that the first batch's torch data_ptr() equals the
// loader tensor's and that it lives in shared memory).  The slab goes back to its worker
// once the torch tensors of the step are gone.
//
// --out writes the weights with loader::pt::save(loader::torch_state_dict(model)): a
// state_dict with Python's key names ("1.weight" [256, 784], "1.bias", "3.weight",
// "3.bias", "5.weight", "5.bias"; float32) that
//   model.load_state_dict(torch.load(path, weights_only=True))
// accepts for nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), ...)
// (torch::save of a module writes a TorchScript archive that torch.load cannot read).
//
// Every epoch prints the mean training loss, the accuracy on the 10,000 test images,
// samples per second and how long the trainer waited for data; the last line is one
// JSON object with the results.
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "loader/dataloader.h"
#include "loader/error.h"
#include "loader/fashion_mnist.h"
#include "loader/generator.h"
#include "loader/worker_main.h"
#include "loader/samplers.h"
#include "loader/serialization/pt.h"
#include "loader/torch.h"

namespace {

using Clock = std::chrono::steady_clock;
constexpr double kPi = 3.14159265358979323846;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// ------------------------------------------------------------------ command line
struct Options {
  int epochs = 10;
  int workers = 2;
  int64_t batch_size = 128;
  double lr = 1e-3;
  uint64_t seed = 0;
  std::vector<int64_t> hidden = {256, 128};
  std::string root = loader::FashionMNIST::kDefaultRoot;
  std::string out;
  int threads = 0;  // libtorch intra-op threads; 0: libtorch's default
};

const char* kUsage =
    "usage: fashion_mnist_libtorch [--epochs N] [--workers W] [--batch-size B] [--lr LR] [--seed S]\n"
    "                              [--hidden 256,128] [--root DIR] [--out PATH.pt] [--threads T]\n"
    "  --epochs N       passes over the 60,000 training images (default 10)\n"
    "  --workers W      loader worker processes (default 2; 0 loads in this process)\n"
    "  --batch-size B   samples per batch (default 128)\n"
    "  --lr LR          Adam's learning rate at the start of the cosine decay (default 1e-3)\n"
    "  --seed S         torch::manual_seed(S) for the weights, and the data order (default 0)\n"
    "  --hidden LIST    hidden layer sizes (default 256,128)\n"
    "  --root DIR       Fashion-MNIST IDX files (default /usr/share/datasets/fashion-mnist)\n"
    "  --out PATH.pt    write the trained weights as a state_dict Python's torch.load reads\n"
    "  --threads T      libtorch intra-op threads (default: libtorch's, one per core)\n";

[[noreturn]] void usage_error(const std::string& msg) {
  std::cerr << "fashion_mnist_libtorch: " << msg << "\n" << kUsage;
  std::exit(2);
}

int64_t parse_int(const std::string& flag, const std::string& v, int64_t lo) {
  try {
    size_t used = 0;
    long long x = std::stoll(v, &used);
    if (used == v.size() && x >= lo) return x;
  } catch (const std::exception&) {
  }
  usage_error(flag + " expects an integer >= " + std::to_string(lo) + ", got '" + v + "'");
}

Options parse_args(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::cout << kUsage;
      std::exit(0);
    }
    if (a.rfind("--", 0) != 0) usage_error("unexpected argument '" + a + "'");
    std::string v;
    auto eq = a.find('=');
    if (eq != std::string::npos) {
      v = a.substr(eq + 1);
      a = a.substr(0, eq);
    } else {
      if (i + 1 >= argc) usage_error(a + " needs a value");
      v = argv[++i];
    }
    if (a == "--epochs") o.epochs = static_cast<int>(parse_int(a, v, 0));
    else if (a == "--workers") o.workers = static_cast<int>(parse_int(a, v, 0));
    else if (a == "--batch-size") o.batch_size = parse_int(a, v, 1);
    else if (a == "--seed") o.seed = static_cast<uint64_t>(parse_int(a, v, 0));
    else if (a == "--threads") o.threads = static_cast<int>(parse_int(a, v, 1));
    else if (a == "--root") o.root = v;
    else if (a == "--out") o.out = v;
    else if (a == "--lr") {
      try {
        size_t used = 0;
        o.lr = std::stod(v, &used);
        if (used != v.size() || !(o.lr > 0) || !std::isfinite(o.lr)) throw std::invalid_argument(v);
      } catch (const std::exception&) {
        usage_error("--lr expects a positive number, got '" + v + "'");
      }
    } else if (a == "--hidden") {
      o.hidden.clear();
      std::stringstream ss(v);
      for (std::string h; std::getline(ss, h, ',');) o.hidden.push_back(parse_int(a, h, 1));
    } else usage_error("unknown option " + a);
  }
  return o;
}

// ------------------------------------------------------------------ model
/// nn.Sequential(Flatten(), Linear(784, h0), ReLU(), ..., Linear(h_last, 10)): the same
/// children, so the same state_dict keys, as the Python model of check_libtorch_checkpoint.py.
torch::nn::Sequential make_model(const std::vector<int64_t>& hidden) {
  torch::nn::Sequential m;
  m->push_back(torch::nn::Flatten());
  int64_t fan_in = 784;
  for (int64_t h : hidden) {
    m->push_back(torch::nn::Linear(fan_in, h));
    m->push_back(torch::nn::ReLU());
    fan_in = h;
  }
  m->push_back(torch::nn::Linear(fan_in, loader::FashionMNIST::kNumClasses));
  return m;
}

/// Accuracy on the test split, fed by a loader in this process (batches of 1000).
double evaluate(torch::nn::Sequential& model, loader::DataLoader& test_loader) {
  torch::NoGradGuard no_grad;
  model->eval();
  int64_t correct = 0, total = 0;
  for (loader::Value& batch : test_loader) {
    std::vector<torch::Tensor> xy = loader::to_torch_list(batch);
    correct += model->forward(xy[0]).argmax(1).eq(xy[1]).sum().item<int64_t>();
    total += xy[1].size(0);
  }
  model->train();
  return static_cast<double>(correct) / static_cast<double>(total);
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
      continue;
    }
    out += c;
  }
  return out + "\"";
}

int train(const Options& opt) {
  const auto t_start = Clock::now();
  loader::register_fashion_mnist();
  if (opt.threads > 0) torch::set_num_threads(opt.threads);

  torch::manual_seed(opt.seed);
  torch::nn::Sequential model = make_model(opt.hidden);
  torch::optim::Adam adam(model->parameters(), torch::optim::AdamOptions(opt.lr));

  auto train_set = loader::make_dataset({"fashion_mnist", loader::Value::dict({{"root", opt.root}, {"train", true}})});
  loader::DataLoaderOptions lo;
  lo.batch_size = opt.batch_size;
  // RandomSampler(train_set, generator=torch.Generator().manual_seed(seed)): the data
  // order depends on the seed only, not on --workers.
  lo.sampler = std::make_shared<loader::RandomSampler>(train_set, std::make_shared<loader::Generator>(opt.seed));
  lo.num_workers = opt.workers;
  lo.persistent_workers = opt.workers > 0;
  loader::DataLoader train_loader(train_set, lo);

  loader::DataLoaderOptions to;
  to.batch_size = 1000;
  loader::DataLoader test_loader(
      loader::make_dataset({"fashion_mnist", loader::Value::dict({{"root", opt.root}, {"train", false}})}), to);

  const int64_t batches = train_loader.size();
  std::printf("Fashion-MNIST with libtorch %s: MLP 784-", TORCH_VERSION);
  for (int64_t h : opt.hidden) std::printf("%lld-", static_cast<long long>(h));
  std::printf("10, Adam lr %g (cosine), batch %lld, %d worker process%s, %lld batches per epoch, %d torch threads\n",
              opt.lr, static_cast<long long>(opt.batch_size), opt.workers, opt.workers == 1 ? "" : "es",
              static_cast<long long>(batches), torch::get_num_threads());
  std::fflush(stdout);

  double train_seconds = 0, wait_seconds = 0, last_loss = std::nan(""), acc = 0;
  int64_t samples_total = 0, step = 0;
  std::optional<bool> zero_copy;  // checked on the first batch
  const double total_steps = static_cast<double>(batches) * opt.epochs;
  for (int epoch = 1; epoch <= opt.epochs; ++epoch) {
    const auto t_epoch = Clock::now();
    double loss_sum = 0, epoch_wait = 0;
    int64_t seen = 0;
    auto it = train_loader.iter();
    for (;;) {
      const auto t_wait = Clock::now();
      std::optional<loader::Value> batch = it.next();
      epoch_wait += seconds_since(t_wait);
      if (!batch) break;
      std::vector<torch::Tensor> xy = loader::to_torch_list(*batch);
      if (xy.size() != 2 || xy[0].scalar_type() != torch::kFloat || xy[1].scalar_type() != torch::kLong)
        throw loader::ValueError("unexpected batch " + batch->repr().substr(0, 200) +
                                 ": expected [float32 [B, 1, 28, 28], int64 [B]]");
      if (!zero_copy) {
        const loader::Tensor& images = (*batch)[0].to_tensor();
        zero_copy = xy[0].data_ptr() == images.data_ptr() &&
                    (opt.workers == 0 || images.storage()->kind() == loader::MemoryKind::SharedMemory);
      }
      // CosineAnnealingLR(T_max = all steps), stepped after every batch.
      const double lr = opt.lr * (1 + std::cos(kPi * static_cast<double>(step++) / total_steps)) / 2;
      for (auto& group : adam.param_groups()) static_cast<torch::optim::AdamOptions&>(group.options()).lr(lr);
      adam.zero_grad();
      torch::Tensor loss = torch::nn::functional::cross_entropy(model->forward(xy[0]), xy[1]);
      loss.backward();
      adam.step();
      const int64_t b = xy[1].size(0);
      loss_sum += loss.item<double>() * static_cast<double>(b);
      seen += b;
    }
    const double epoch_seconds = seconds_since(t_epoch);
    train_seconds += epoch_seconds;
    wait_seconds += epoch_wait;
    samples_total += seen;
    last_loss = loss_sum / static_cast<double>(seen);
    acc = evaluate(model, test_loader);
    std::printf("epoch %d/%d  loss %.4f  test_accuracy %.4f  %.0f samples/s  waited for data %.2f s (%.0f%%)  %.1f s\n",
                epoch, opt.epochs, last_loss, acc, static_cast<double>(seen) / epoch_seconds, epoch_wait,
                100.0 * epoch_wait / epoch_seconds, epoch_seconds);
    std::fflush(stdout);
  }
  if (opt.epochs == 0) {
    acc = evaluate(model, test_loader);
    std::printf("test accuracy %.4f (no training: --epochs 0)\n", acc);
  }
  train_loader.shutdown();

  if (!opt.out.empty()) {
    loader::pt::save(loader::torch_state_dict(*model), opt.out);
    std::printf("checkpoint: %s (state_dict; check with demos/check_libtorch_checkpoint.py %s --expect %.4f)\n",
                opt.out.c_str(), opt.out.c_str(), acc);
  }
  char loss_text[32] = "null";
  if (!std::isnan(last_loss)) std::snprintf(loss_text, sizeof loss_text, "%.6f", last_loss);
  std::printf(
      "{\"test_accuracy\": %.4f, \"epochs\": %d, \"seconds\": %.2f, \"train_seconds\": %.2f, "
      "\"samples_per_s\": %.0f, \"train_loss\": %s, \"data_wait_s\": %.3f, \"workers\": %d, \"batch_size\": %lld, "
      "\"lr\": %g, \"seed\": %llu, \"torch_threads\": %d, \"zero_copy\": %s, \"checkpoint\": %s}\n",
      acc, opt.epochs, seconds_since(t_start), train_seconds,
      train_seconds > 0 ? static_cast<double>(samples_total) / train_seconds : 0.0, loss_text, wait_seconds,
      opt.workers, static_cast<long long>(opt.batch_size), opt.lr, static_cast<unsigned long long>(opt.seed),
      torch::get_num_threads(), zero_copy ? (*zero_copy ? "true" : "false") : "null",
      opt.out.empty() ? "null" : json_string(opt.out).c_str());
  return zero_copy.value_or(true) ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (auto rc = loader::runtime::run_worker_if_requested(argc, argv)) return *rc;
  Options opt = parse_args(argc, argv);
  try {
    return train(opt);
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::cerr << "fashion_mnist_libtorch: " << e.what() << "\n";
    return 1;
  }
}
