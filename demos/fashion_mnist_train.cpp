// Trains a multi-layer perceptron on the real Fashion-MNIST data, fed by the loader
// (shuffling, worker processes, shared-memory batches), in plain C++ with Eigen.
//
//   build/demos/fashion_mnist_train --epochs 15 --workers 2 --out fashion_mlp.pt
//
// The model is exactly PyTorch's
//   torch.nn.Sequential(Flatten(), Linear(784, 256), ReLU(), Linear(256, 128), ReLU(), Linear(128, 10))
// on images scaled to [0, 1] (pixel / 255), initialised as PyTorch initialises it
// after torch.manual_seed(seed) (bit for bit: the same generator, the same draws),
// trained with Adam (lr 1e-3) or SGD on mini-batches of 128 with cross-entropy loss,
// the learning rate following a cosine from lr to 0 over all steps (PyTorch's
// CosineAnnealingLR(T_max = steps) stepped per batch; --schedule constant turns it off).
// 15 epochs reach about 0.89 test accuracy (the Fashion-MNIST benchmark lists 0.8833
// for an MLP 256-128-100).
// The data order is RandomSampler(train_set, generator=torch.Generator().manual_seed(seed))'s,
// the same for any number of workers, so --workers never changes the result.
//
// --out writes the weights as a .pt state_dict with that model's key names and
// shapes ("1.weight" [256, 784], "1.bias", "3.weight", "3.bias", "5.weight",
// "5.bias"; float32), which
//   model.load_state_dict(torch.load("fashion_mlp.pt"))
// accepts (demos/check_checkpoint.py evaluates it in PyTorch).  --resume reads such
// a file (written by this program or by PyTorch) and continues from its weights;
// the optimizer state and the learning-rate schedule start afresh (a training
// checkpoint, below, restores them too).
//
// --checkpoint PATH.pt --checkpoint-every N saves the whole training state every N
// optimizer steps (default: at the end of every epoch), replacing PATH.pt atomically
// (PATH.pt.tmp is written, fsync'ed and renamed over it, so a kill at any moment
// leaves the previous checkpoint or the new one, never a torn file).  It is one dict,
// whose entries this program makes of tensors, ints, strings, bools, lists and dicts
// only (floats as 0-dim float64 tensors: torch 1.13's torch.load(path,
// weights_only=True) reads no Python float; "loader" is as the DataLoader makes it):
//   {"model":        the state_dict --out writes,
//    "optimizer":    torch.optim.Adam's / SGD's state_dict() layout: {"state": {0: {"step",
//                    "exp_avg", "exp_avg_sq"} or {"momentum_buffer"}, ...}, "param_groups":
//                    [{"lr", ..., "params": [0..5]}]} (parameters in model.parameters() order),
//    "step":         optimizer steps done (the cosine schedule's position),
//    "epoch":        the epoch (from 1) that step belongs to,
//    "loader":       DataLoader::state_dict(): the shuffle's and the default generator's
//                    states and where the epoch stands,
//    "epoch_totals": the running loss/accuracy sums of that epoch (so its printed figures
//                    match too),
//    "config":       the options that change the result (batch_size, seed, hidden,
//                    optimizer, lr, momentum, schedule, epochs, train_samples; and
//                    workers, which does not: any --workers resumes it)}.
// --resume also takes such a training checkpoint: the weights, the optimizer's moments
// and step count, the schedule's position and the loader's place in the epoch are
// restored, so a run killed at any step (even SIGKILL) and started again with the same
// command plus --resume PATH.pt writes exactly the --out bytes of an uninterrupted run,
// whatever --workers is.  A checkpoint made with other result-changing options is
// refused, naming the option and both values (start afresh, or use the old options).
// --train-samples N trains on N samples per epoch (RandomSampler's num_samples: the
// first N of each epoch's shuffle) for quick runs and tests.
//
// --image-folder DIR trains on PNG files instead of the IDX files: DIR/train and DIR/test
// as `loader images export --dataset fashion-mnist --out DIR` writes them (torchvision
// ImageFolders, class folders 0_T-shirt_top .. 9_Ankle_boot, so class index = label),
// read by the "image_folder" dataset in mode "L" (decoded in the worker processes).  The
// training images get a light augmentation, --augment flip (default: RandomHorizontalFlip
// then ToTensor), crop (RandomResizedCrop(28, scale=(0.8, 1)) then ToTensor) or none
// (ToTensor: the IDX path's pixels, though in ImageFolder's order, class by class, so the same
// shuffle visits other images and the run differs from the IDX one); the test images
// ToTensor only.  15 epochs reach 0.889 test accuracy with flip, 0.878 with crop.  The workers
// are seeded per task (WorkerSeeding::PerTask), so the augmentation, and with it the
// result, is the same for any --workers.  scripts/demo_images.sh exports and trains.
// Every epoch prints the mean training loss, the accuracy on the training batches
// and on the 10,000 test images, samples per second and how long the trainer waited
// for data; a progress bar runs while the epoch does when standard output is a
// terminal.  The last line of output is one JSON object with the results.  --log
// writes the per-epoch figures as JSON lines (a run resumed from a training checkpoint
// keeps the lines of the epochs before it), which scripts/plot_training.py turns into a PNG:
//   {"epoch": 1, "loss": 0.52, "train_accuracy": 0.81, "test_accuracy": 0.85,
//    "samples_per_s": 41000, "data_wait_s": 0.21, "epoch_s": 1.46, "lr": 0.00099, "workers": 2}
#include <fcntl.h>
#include <unistd.h>

#include <Eigen/Dense>
#include <chrono>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
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

#ifdef LOADER_DEMO_OPENBLAS
extern "C" void openblas_set_num_threads(int num_threads);
#endif

namespace {

using Clock = std::chrono::steady_clock;
constexpr double kPi = 3.14159265358979323846;
using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Vector = Eigen::VectorXf;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// ------------------------------------------------------------------ command line
struct Options {
  int epochs = 15;
  int workers = 2;
  int64_t batch_size = 128;
  std::string optimizer = "adam";
  std::string schedule = "cosine";
  double lr = -1;  // default per optimizer: Adam 1e-3, SGD 0.05
  double momentum = 0.9;
  uint64_t seed = 0;
  std::vector<int64_t> hidden = {256, 128};
  std::string root = loader::FashionMNIST::kDefaultRoot;
  std::string out;
  std::string resume;
  std::string checkpoint;
  int64_t checkpoint_every = 0;  // 0: the last step of every epoch
  int64_t train_samples = 0;     // 0: the whole training set every epoch
  std::string log;
  std::string image_folder;     // --image-folder: train/test from PNG ImageFolders
  std::string augment = "flip";  // --image-folder: flip, crop or none
  bool augment_given = false;
  int threads = 0;  // BLAS threads; 0: library default
  int progress = -1;  // -1: when stdout is a terminal
};

const char* kUsage =
    "usage: fashion_mnist_train [--epochs N] [--workers W] [--batch-size B] [--optimizer adam|sgd]\n"
    "                           [--lr LR] [--momentum M] [--schedule cosine|constant] [--seed S]\n"
    "                           [--hidden 256,128] [--root DIR] [--out PATH.pt] [--resume PATH.pt]\n"
    "                           [--checkpoint PATH.pt [--checkpoint-every N]] [--train-samples N]\n"
    "                           [--log PATH.jsonl] [--image-folder DIR [--augment flip|crop|none]]\n"
    "                           [--threads T] [--progress | --no-progress]\n"
    "  --epochs N        passes over the 60,000 training images (default 15; 0 only evaluates)\n"
    "  --workers W       loader worker processes (default 2; 0 loads in this process)\n"
    "  --batch-size B    samples per batch (default 128)\n"
    "  --optimizer O     adam (default, lr 1e-3) or sgd (momentum 0.9, lr 0.05)\n"
    "  --schedule S      cosine (default: lr decays to 0 over the run) or constant\n"
    "  --seed S          initial weights as after torch.manual_seed(S), and the data order (default 0)\n"
    "  --hidden LIST     hidden layer sizes (default 256,128: the documented model)\n"
    "  --root DIR        Fashion-MNIST IDX files (default /usr/share/datasets/fashion-mnist)\n"
    "  --out PATH.pt     write the trained weights as a PyTorch state_dict\n"
    "  --resume PATH.pt  start from the weights in a state_dict written by this program or PyTorch,\n"
    "                    or go on exactly where a --checkpoint file left off (same options)\n"
    "  --checkpoint PATH.pt  save weights, optimizer, schedule and data position (atomically)\n"
    "  --checkpoint-every N  ... every N optimizer steps (default: at the end of every epoch)\n"
    "  --train-samples N training samples per epoch, the first N of each shuffle (default all)\n"
    "  --log PATH.jsonl  append one JSON line per epoch (loss, accuracies, samples/s, data wait)\n"
    "  --image-folder DIR  train on DIR/train, test on DIR/test: PNG ImageFolders written by\n"
    "                    `loader images export --dataset fashion-mnist --out DIR` (instead of --root)\n"
    "  --augment A       --image-folder: flip (default), crop (RandomResizedCrop(28, scale=(0.8, 1))) or none\n"
    "  --threads T       BLAS threads for the matrix products (default: the library's)\n";

[[noreturn]] void usage_error(const std::string& msg) {
  std::cerr << "fashion_mnist_train: " << msg << "\n" << kUsage;
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

double parse_double(const std::string& flag, const std::string& v) {
  try {
    size_t used = 0;
    double x = std::stod(v, &used);
    if (used == v.size() && x > 0 && std::isfinite(x)) return x;
  } catch (const std::exception&) {
  }
  usage_error(flag + " expects a positive number, got '" + v + "'");
}

Options parse_args(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::cout << kUsage;
      std::exit(0);
    }
    if (a == "--progress") { o.progress = 1; continue; }
    if (a == "--no-progress") { o.progress = 0; continue; }
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
    else if (a == "--optimizer") {
      if (v != "adam" && v != "sgd") usage_error("--optimizer must be adam or sgd, got '" + v + "'");
      o.optimizer = v;
    } else if (a == "--schedule") {
      if (v != "cosine" && v != "constant") usage_error("--schedule must be cosine or constant, got '" + v + "'");
      o.schedule = v;
    } else if (a == "--lr") o.lr = parse_double(a, v);
    else if (a == "--momentum") {
      o.momentum = std::stod(v);
      if (!(o.momentum >= 0 && o.momentum < 1)) usage_error("--momentum must be in [0, 1)");
    } else if (a == "--seed") o.seed = static_cast<uint64_t>(parse_int(a, v, 0));
    else if (a == "--hidden") {
      o.hidden.clear();
      std::stringstream ss(v);
      std::string item;
      while (std::getline(ss, item, ',')) o.hidden.push_back(parse_int(a, item, 1));
    } else if (a == "--root") o.root = v;
    else if (a == "--out") o.out = v;
    else if (a == "--resume") o.resume = v;
    else if (a == "--checkpoint") o.checkpoint = v;
    else if (a == "--checkpoint-every") o.checkpoint_every = parse_int(a, v, 1);
    else if (a == "--train-samples") o.train_samples = parse_int(a, v, 1);
    else if (a == "--log") o.log = v;
    else if (a == "--image-folder") o.image_folder = v;
    else if (a == "--augment") {
      if (v != "flip" && v != "crop" && v != "none") usage_error("--augment must be flip, crop or none, got '" + v + "'");
      o.augment = v;
      o.augment_given = true;
    }
    else if (a == "--threads") o.threads = static_cast<int>(parse_int(a, v, 1));
    else usage_error("unknown option " + a);
  }
  if (o.lr < 0) o.lr = o.optimizer == "adam" ? 1e-3 : 0.05;
  if (o.checkpoint_every > 0 && o.checkpoint.empty())
    usage_error("--checkpoint-every needs --checkpoint PATH.pt (where to save)");
  if (o.augment_given && o.image_folder.empty()) usage_error("--augment needs --image-folder (the IDX path has no augmentation)");
  if (o.image_folder.empty()) o.augment = "none";
  return o;
}

// ------------------------------------------------------------------ the model
// One Linear layer, weight [out, in] row-major exactly as PyTorch stores it.
struct Linear {
  RowMatrix weight, grad_weight, m_weight, v_weight;
  Vector bias, grad_bias, m_bias, v_bias;
};

// torch.nn.init's uniform_(from, to) on a float32 CPU tensor, bit for bit: one 32-bit
// draw per element, 24 random bits scaled in double, (x * (to - from) + from).
void uniform_(float* p, int64_t n, double from_d, double to_d, loader::Generator& g) {
  const float from = static_cast<float>(from_d), to = static_cast<float>(to_d);
  for (int64_t i = 0; i < n; ++i) {
    double x = static_cast<double>(g.random() & ((1u << 24) - 1)) * (1.0 / (1u << 24));
    p[i] = static_cast<float>(x * static_cast<double>(to - from) + from);
  }
}

// The Sequential: Flatten, then Linear/ReLU pairs, a final Linear (logits).
class MLP {
 public:
  MLP(int64_t in, const std::vector<int64_t>& hidden, int64_t classes) {
    int64_t fan_in = in;
    for (int64_t h : hidden) {
      layers_.push_back(make_layer(fan_in, h));
      fan_in = h;
    }
    layers_.push_back(make_layer(fan_in, classes));
  }

  /// nn.Linear.reset_parameters for every layer, in module order: kaiming_uniform_
  /// (a = sqrt(5)) on the weight, then U(-1/sqrt(fan_in), 1/sqrt(fan_in)) on the bias.
  void reset_parameters(loader::Generator& g) {
    for (auto& l : layers_) {
      const double fan_in = static_cast<double>(l.weight.cols());
      const double gain = std::sqrt(2.0 / (1 + 5.0));
      const double bound = std::sqrt(3.0) * (gain / std::sqrt(fan_in));
      uniform_(l.weight.data(), l.weight.size(), -bound, bound, g);
      const double bias_bound = 1 / std::sqrt(fan_in);
      uniform_(l.bias.data(), l.bias.size(), -bias_bound, bias_bound, g);
    }
  }

  std::vector<Linear>& layers() { return layers_; }
  const std::vector<Linear>& layers() const { return layers_; }
  /// The state_dict key prefix of layer k in the Sequential: Flatten is module 0,
  /// each Linear is followed by a ReLU, so Linears are modules 1, 3, 5, ...
  static std::string module_name(size_t k) { return std::to_string(2 * k + 1); }

  /// Logits for a batch x [B, in]; keeps the activations for backward().
  const RowMatrix& forward(const Eigen::Ref<const RowMatrix>& x) {
    acts_.resize(layers_.size());
    const RowMatrix* input = nullptr;
    for (size_t k = 0; k < layers_.size(); ++k) {
      RowMatrix& z = acts_[k];
      if (k == 0) z.noalias() = x * layers_[k].weight.transpose();
      else z.noalias() = *input * layers_[k].weight.transpose();
      z.rowwise() += layers_[k].bias.transpose();
      if (k + 1 < layers_.size()) z = z.cwiseMax(0.0f);  // ReLU in place: z > 0 <=> relu(z) > 0
      input = &z;
    }
    return acts_.back();
  }

  /// Gradients of the loss for dlogits [B, classes], after forward(x).
  void backward(const Eigen::Ref<const RowMatrix>& x, RowMatrix& dlogits) {
    RowMatrix* delta = &dlogits;
    for (size_t k = layers_.size(); k-- > 0;) {
      Linear& l = layers_[k];
      if (k > 0) l.grad_weight.noalias() = delta->transpose() * acts_[k - 1];
      else l.grad_weight.noalias() = delta->transpose() * x;
      l.grad_bias = delta->colwise().sum().transpose();
      if (k > 0) {
        next_delta_.noalias() = *delta * l.weight;
        next_delta_ = (acts_[k - 1].array() > 0.0f).select(next_delta_, 0.0f);
        std::swap(delta_buf_, next_delta_);
        delta = &delta_buf_;
      }
    }
  }

 private:
  static Linear make_layer(int64_t in, int64_t out) {
    Linear l;
    l.weight = RowMatrix::Zero(out, in);
    l.bias = Vector::Zero(out);
    l.m_weight = l.v_weight = RowMatrix::Zero(out, in);
    l.m_bias = l.v_bias = Vector::Zero(out);
    return l;
  }
  std::vector<Linear> layers_;
  std::vector<RowMatrix> acts_;
  RowMatrix delta_buf_, next_delta_;
};

/// Mean cross-entropy of logits against labels; dlogits = (softmax - onehot) / B.
double cross_entropy(const RowMatrix& logits, const int64_t* labels, RowMatrix& dlogits) {
  const Eigen::Index b = logits.rows();
  dlogits.resize(b, logits.cols());
  double loss = 0;
  for (Eigen::Index r = 0; r < b; ++r) {
    const float mx = logits.row(r).maxCoeff();
    auto e = (logits.row(r).array() - mx).exp();
    const float sum = e.sum();
    dlogits.row(r) = e / sum;
    loss += std::log(static_cast<double>(sum)) + mx - logits(r, labels[r]);
    dlogits(r, labels[r]) -= 1.0f;
  }
  dlogits /= static_cast<float>(b);
  return loss / static_cast<double>(b);
}

// torch.optim.Adam (betas 0.9, 0.999, eps 1e-8, no weight decay), single-tensor path.
class Adam {
 public:
  explicit Adam(double lr) : lr_(lr) {}
  void set_lr(double lr) { lr_ = lr; }
  /// Steps taken: the bias corrections' t (PyTorch's state["step"]).  The moments are
  /// the layers' m_* (exp_avg) and v_* (exp_avg_sq).
  int steps() const { return t_; }
  void set_steps(int t) { t_ = t; }
  void step(MLP& model) {
    ++t_;
    const double bc1 = 1 - std::pow(kBeta1, t_), bc2 = 1 - std::pow(kBeta2, t_);
    const float step_size = static_cast<float>(lr_ / bc1);
    const float bc2_sqrt = static_cast<float>(std::sqrt(bc2));
    for (auto& l : model.layers()) {
      update(l.weight.array(), l.grad_weight.array(), l.m_weight.array(), l.v_weight.array(), step_size, bc2_sqrt);
      update(l.bias.array(), l.grad_bias.array(), l.m_bias.array(), l.v_bias.array(), step_size, bc2_sqrt);
    }
  }

 private:
  template <class P, class G, class M>
  static void update(P p, const G& g, M m, M v, float step_size, float bc2_sqrt) {
    m = kBeta1 * m + (1 - kBeta1) * g;
    v = kBeta2 * v + (1 - kBeta2) * g * g;
    p -= step_size * m / (v.sqrt() / bc2_sqrt + kEps);
  }
  static constexpr float kBeta1 = 0.9f, kBeta2 = 0.999f, kEps = 1e-8f;
  double lr_;
  int t_ = 0;
};

// torch.optim.SGD(lr, momentum): buf = momentum * buf + g (buf = g at the first step).
class SGD {
 public:
  SGD(double lr, double momentum) : lr_(static_cast<float>(lr)), momentum_(static_cast<float>(momentum)) {}
  void set_lr(double lr) { lr_ = static_cast<float>(lr); }
  /// Whether the momentum buffers (the layers' m_*) exist yet: PyTorch's state is
  /// empty before the first step, which copies the gradient instead of decaying.
  bool started() const { return !first_; }
  void set_started(bool started) { first_ = !started; }
  void step(MLP& model) {
    for (auto& l : model.layers()) {
      update(l.weight.array(), l.grad_weight.array(), l.m_weight.array());
      update(l.bias.array(), l.grad_bias.array(), l.m_bias.array());
    }
    first_ = false;
  }

 private:
  template <class P, class G, class M>
  void update(P p, const G& g, M buf) {
    if (momentum_ == 0) {
      p -= lr_ * g;
      return;
    }
    if (first_) buf = g;
    else buf = momentum_ * buf + g;
    p -= lr_ * buf;
  }
  float lr_, momentum_;
  bool first_ = true;
};

// ------------------------------------------------------------------ checkpoints
/// A float32 tensor holding a copy of `n` floats at `p`.
loader::Value float_tensor(const float* p, const loader::Dims& sizes) {
  auto t = loader::Tensor::empty(sizes, loader::DType::Float32);
  std::memcpy(t.data_ptr(), p, t.nbytes());
  return loader::Value(std::move(t));
}

/// The model's state_dict as PyTorch's nn.Sequential names it.
loader::Value state_dict(const MLP& model) {
  std::vector<std::pair<loader::Value, loader::Value>> items;
  for (size_t k = 0; k < model.layers().size(); ++k) {
    const Linear& l = model.layers()[k];
    items.emplace_back(loader::Value(MLP::module_name(k) + ".weight"),
                       float_tensor(l.weight.data(), {l.weight.rows(), l.weight.cols()}));
    items.emplace_back(loader::Value(MLP::module_name(k) + ".bias"), float_tensor(l.bias.data(), {l.bias.size()}));
  }
  return loader::Value::dict(std::move(items), "collections.OrderedDict");
}

/// model.state_dict() with its `_metadata` attribute ({"": {"version": 1}, "0":
/// {"version": 1}, ...}, one entry per module), for SaveOptions::states: the state_dict
/// is `.object`, which may be saved alone or inside a bigger dict.
loader::pt::ObjectState state_dict_with_metadata(const MLP& model) {
  loader::Value sd = state_dict(model);
  std::vector<std::pair<loader::Value, loader::Value>> meta;
  auto version = [] { return loader::Value::dict({{"version", 1}}); };
  meta.emplace_back(loader::Value(""), version());
  for (size_t m = 0; m < 2 * model.layers().size(); ++m) meta.emplace_back(loader::Value(std::to_string(m)), version());
  return {sd, loader::Value::dict({{"_metadata", loader::Value::dict(std::move(meta), "collections.OrderedDict")}})};
}

/// torch.save(model.state_dict(), path).
void save_state_dict(const MLP& model, const std::string& path) {
  loader::pt::SaveOptions so;
  so.states.push_back(state_dict_with_metadata(model));
  loader::pt::save(so.states.back().object, path, so);
}

/// load_state_dict(strict=True): every key present with the right shape, no extra keys.
void load_state_dict(MLP& model, const loader::Value& sd, const std::string& path) {
  if (!sd.is_dict())
    throw loader::ValueError(path + " holds a " + sd.python_type() + ", not a state_dict");
  std::map<std::string, loader::Tensor> tensors;
  for (const auto& [k, v] : sd.dict_items()) {
    if (!k.is_string() || !loader::pt::is_tensor_like(v))
      throw loader::ValueError(path + ": state_dict entry " + k.repr() + " is not a named tensor");
    tensors[k.to_string()] = loader::pt::tensor_of(v);
  }
  auto take = [&](const std::string& key, int64_t rows, int64_t cols, float* dst) {
    auto it = tensors.find(key);
    if (it == tensors.end())
      throw loader::ValueError(path + ": Missing key \"" + key +
                               "\" in state_dict (the model is Sequential(Flatten, Linear, ReLU, ...); "
                               "check --hidden)");
    loader::Dims want = cols < 0 ? loader::Dims{rows} : loader::Dims{rows, cols};
    if (it->second.sizes() != want)
      throw loader::ValueError(path + ": size mismatch for " + key + ": copying a param with shape " +
                               it->second.sizes().str() + " from checkpoint, the shape in current model is " +
                               want.str() + " (check --hidden)");
    loader::Tensor t = it->second.to(loader::DType::Float32).contiguous();
    std::memcpy(dst, t.data_ptr(), t.nbytes());
    tensors.erase(it);
  };
  for (size_t k = 0; k < model.layers().size(); ++k) {
    Linear& l = model.layers()[k];
    take(MLP::module_name(k) + ".weight", l.weight.rows(), l.weight.cols(), l.weight.data());
    take(MLP::module_name(k) + ".bias", l.bias.size(), -1, l.bias.data());
  }
  if (!tensors.empty())
    throw loader::ValueError(path + ": Unexpected key \"" + tensors.begin()->first +
                             "\" in state_dict (check --hidden)");
}

// ------------------------------------------------------------------ training checkpoints
// What --checkpoint saves and --resume restores (the top-of-file comment lists the
// entries).  Everything the next step reads is in it: the weights, both moments and
// the step count of Adam (its bias corrections) or SGD's momentum buffers, the step (the
// cosine schedule's position), and the loader's state_dict (the shuffle generator and
// the default generator, which the loader's base_seed draws come from, and where the
// epoch stands).  The rest of the run is a function of these alone.

/// A float as the training checkpoint stores it: a 0-dim float64 tensor, because torch
/// 1.13's torch.load(weights_only=True) reads no Python float (its unpickler refuses
/// BINFLOAT), and a tensor keeps every bit.
loader::Value float_value(double x) {
  auto t = loader::Tensor::empty(loader::Dims{}, loader::DType::Float64);
  *t.data<double>() = x;
  return loader::Value(std::move(t));
}

/// The number in a float_value() (or a plain float or int).
double float_of(const loader::Value& v, const std::string& what) {
  if (v.is_number()) return v.to_double();
  if (v.is_tensor() && v.to_tensor().numel() == 1) return v.to_tensor().to(loader::DType::Float64).data<double>()[0];
  throw loader::ValueError(what + " is " + v.repr() + ", not a number (the file is damaged, or not a checkpoint of "
                           "this trainer)");
}

/// A parameter in model.parameters() order (1.weight, 1.bias, 3.weight, ...: what
/// PyTorch's optimizer state_dict numbers 0, 1, 2, ...) with its optimizer buffers.
struct Param {
  float* value;
  float* m;  // Adam's exp_avg, SGD's momentum_buffer
  float* v;  // Adam's exp_avg_sq
  loader::Dims sizes;
};

std::vector<Param> parameters(MLP& model) {
  std::vector<Param> ps;
  for (Linear& l : model.layers()) {
    ps.push_back({l.weight.data(), l.m_weight.data(), l.v_weight.data(), {l.weight.rows(), l.weight.cols()}});
    ps.push_back({l.bias.data(), l.m_bias.data(), l.v_bias.data(), {l.bias.size()}});
  }
  return ps;
}

/// CosineAnnealingLR(T_max = total_steps) after `step` scheduler steps (closed form).
double lr_at(const Options& opt, int64_t step, double total_steps) {
  return opt.schedule == "cosine" ? opt.lr * (1 + std::cos(kPi * static_cast<double>(step) / total_steps)) / 2 : opt.lr;
}

/// optimizer.state_dict() as torch.optim.Adam / SGD (1.13) lay it out (the per-parameter
/// tensors under PyTorch's names; the float hyperparameters as float_value()s); `lr` is
/// the learning rate of the next step (the scheduler has set it).
loader::Value optimizer_state_dict(MLP& model, const Options& opt, const Adam& adam, const SGD& sgd, double lr) {
  using loader::Value;
  const bool is_adam = opt.optimizer == "adam";
  std::vector<Param> ps = parameters(model);
  std::vector<std::pair<Value, Value>> state;
  std::vector<Value> ids;
  for (size_t i = 0; i < ps.size(); ++i) {
    ids.emplace_back(static_cast<int64_t>(i));
    // PyTorch has no state for a parameter before its first step.
    if (is_adam && adam.steps() > 0) {
      auto step = loader::Tensor::empty(loader::Dims{}, loader::DType::Float32);  // torch.tensor(float(step))
      *step.data<float>() = static_cast<float>(adam.steps());
      state.emplace_back(Value(static_cast<int64_t>(i)),
                         Value::dict({{"step", Value(std::move(step))},
                                      {"exp_avg", float_tensor(ps[i].m, ps[i].sizes)},
                                      {"exp_avg_sq", float_tensor(ps[i].v, ps[i].sizes)}}));
    } else if (!is_adam && sgd.started()) {
      state.emplace_back(Value(static_cast<int64_t>(i)),
                         Value::dict({{"momentum_buffer", opt.momentum > 0 ? float_tensor(ps[i].m, ps[i].sizes) : Value()}}));
    }
  }
  std::vector<std::pair<Value, Value>> group;
  auto add = [&](const char* key, Value v) { group.emplace_back(Value(key), std::move(v)); };
  add("lr", float_value(lr));
  if (is_adam) {
    add("betas", Value::tuple({float_value(0.9), float_value(0.999)}));
    add("eps", float_value(1e-8));
    add("weight_decay", 0);
    add("amsgrad", false);
    add("maximize", false);
    add("foreach", Value());
    add("capturable", false);
    add("differentiable", false);
    add("fused", false);
  } else {
    add("momentum", float_value(opt.momentum));
    add("dampening", 0);
    add("weight_decay", 0);
    add("nesterov", false);
    add("maximize", false);
    add("foreach", Value());
    add("differentiable", false);
  }
  if (opt.schedule == "cosine") add("initial_lr", float_value(opt.lr));  // set by the LR scheduler
  add("params", Value::list(std::move(ids)));
  return Value::dict({{"state", Value::dict(std::move(state))}, {"param_groups", Value::list({Value::dict(std::move(group))})}});
}

/// Copies the float tensor `v` (float32 or convertible, shape `want`) to `dst`.
void copy_float_tensor(const loader::Value& v, const loader::Dims& want, float* dst, const std::string& what) {
  if (!loader::pt::is_tensor_like(v))
    throw loader::ValueError(what + " is a " + v.python_type() + ", not a tensor (the file is not a checkpoint of this "
                             "trainer, or it is damaged)");
  const loader::Tensor& t = loader::pt::tensor_of(v);
  if (t.sizes() != want)
    throw loader::ValueError(what + " has shape " + t.sizes().str() + ", the model's parameter has " + want.str() +
                             " (check --hidden)");
  loader::Tensor f = t.to(loader::DType::Float32).contiguous();
  std::memcpy(dst, f.data_ptr(), f.nbytes());
}

/// Loads an optimizer_state_dict() into the model's buffers and the optimizer.
void load_optimizer_state(const loader::Value& o, MLP& model, const Options& opt, Adam& adam, SGD& sgd,
                          const std::string& where) {
  if (!o.is_dict() || !o.contains("state") || !o.at("state").is_dict())
    throw loader::ValueError(where + " is not an optimizer state_dict (no \"state\" dict): the file is not a checkpoint "
                             "of this trainer, or it is damaged");
  const loader::Value& state = o.at("state");
  std::vector<Param> ps = parameters(model);
  const bool is_adam = opt.optimizer == "adam";
  if (state.size() == 0) {  // saved before the first step: nothing to restore
    adam.set_steps(0);
    sgd.set_started(false);
    return;
  }
  if (state.size() != ps.size())
    throw loader::ValueError(where + " holds the state of " + std::to_string(state.size()) + " parameters, the model has " +
                             std::to_string(ps.size()) + " (check --hidden)");
  std::optional<int64_t> steps;
  for (const auto& item : state.dict_items()) {
    const loader::Value& key = item.first;
    const loader::Value& entry = item.second;
    const int64_t i = key.is_int() ? key.to_int() : -1;
    if (i < 0 || i >= static_cast<int64_t>(ps.size()) || !entry.is_dict())
      throw loader::ValueError(where + ": unexpected entry " + key.repr() + " in \"state\" (parameters are numbered 0 to " +
                               std::to_string(ps.size() - 1) + ")");
    const Param& p = ps[static_cast<size_t>(i)];
    const std::string at = where + "[\"state\"][" + std::to_string(i) + "]";
    auto need = [&](const char* name) -> const loader::Value& {
      if (!entry.contains(name))
        throw loader::ValueError(at + " has no \"" + name + "\" (a checkpoint of --optimizer " + opt.optimizer +
                                 " has one for every parameter)");
      return entry.at(name);
    };
    if (is_adam) {
      const loader::Value& s = need("step");
      const int64_t t = s.is_tensor() ? static_cast<int64_t>(s.to_tensor().to(loader::DType::Float64).data<double>()[0])
                                      : s.to_int();
      if (steps && *steps != t)
        throw loader::ValueError(at + "[\"step\"] is " + std::to_string(t) + ", another parameter's is " +
                                 std::to_string(*steps) + " (this trainer steps all parameters together)");
      steps = t;
      copy_float_tensor(need("exp_avg"), p.sizes, p.m, at + "[\"exp_avg\"]");
      copy_float_tensor(need("exp_avg_sq"), p.sizes, p.v, at + "[\"exp_avg_sq\"]");
    } else {
      const loader::Value& buf = need("momentum_buffer");
      if (!buf.is_none()) copy_float_tensor(buf, p.sizes, p.m, at + "[\"momentum_buffer\"]");
    }
  }
  if (is_adam) adam.set_steps(static_cast<int>(*steps));
  else sgd.set_started(true);
}

/// The options that change the trained weights (and --workers, which does not; kept to
/// resume the loader strictly when it is the same).
loader::Value config_of(const Options& opt) {
  std::vector<loader::Value> hidden;
  for (int64_t h : opt.hidden) hidden.emplace_back(h);
  return loader::Value::dict({{"batch_size", opt.batch_size},
                              {"seed", static_cast<int64_t>(opt.seed)},
                              {"hidden", loader::Value::list(std::move(hidden))},
                              {"optimizer", opt.optimizer},
                              {"lr", float_value(opt.lr)},
                              {"momentum", float_value(opt.momentum)},
                              {"schedule", opt.schedule},
                              {"epochs", opt.epochs},
                              {"train_samples", opt.train_samples},
                              {"augment", opt.augment},
                              {"workers", opt.workers}});
}

/// An option's value as it would be typed, e.g. "--hidden 256,128" or "no --train-samples".
std::string option_text(const std::string& flag, const loader::Value& v) {
  if (v.is_list()) {
    std::string s;
    for (const auto& x : v.items()) s += (s.empty() ? "" : ",") + x.repr();
    return flag + " " + s;
  }
  if (v.is_double() || v.is_tensor()) {
    const double x = float_of(v, flag);
    char buf[40];
    for (int digits = 6; digits <= 17; ++digits) {  // the shortest text that reads back the same
      std::snprintf(buf, sizeof buf, "%.*g", digits, x);
      if (std::strtod(buf, nullptr) == x) break;
    }
    return flag + " " + buf;
  }
  if (v.is_string()) return flag + " " + v.to_string();
  if (flag == "--train-samples" && v.is_int() && v.to_int() == 0) return "no --train-samples";
  return flag + " " + v.repr();
}

/// Refuses a training checkpoint of a run with other result-changing options: resuming
/// it would give neither that run's weights nor this one's.
void check_config(const loader::Value& saved, const Options& opt, const std::string& path) {
  if (!saved.is_dict())
    throw loader::ValueError(path + ": \"config\" is a " + saved.python_type() + ", not a dict (the file is not a "
                             "checkpoint of this trainer, or it is damaged)");
  const loader::Value now = config_of(opt);
  const std::pair<const char*, const char*> options[] = {
      {"batch_size", "--batch-size"}, {"seed", "--seed"},     {"hidden", "--hidden"},
      {"optimizer", "--optimizer"},   {"lr", "--lr"},         {"momentum", "--momentum"},
      {"schedule", "--schedule"},     {"epochs", "--epochs"}, {"train_samples", "--train-samples"},
      {"augment", "--augment"}};
  std::string then, here;  // every option that differs, not just the first
  for (const auto& [key, flag] : options) {
    if (std::string(key) == "momentum" && opt.optimizer != "sgd") continue;  // Adam does not use it
    // Checkpoints from before --image-folder: no augmentation.
    if (std::string(key) == "augment" && !saved.contains(key)) {
      if (opt.augment != "none") {
        then += (then.empty() ? "" : ", ") + std::string("no --augment");
        here += (here.empty() ? "" : ", ") + option_text(flag, now.at(key));
      }
      continue;
    }
    if (!saved.contains(key))
      throw loader::ValueError(path + ": \"config\" has no \"" + key + "\" (the file is not a checkpoint of this "
                               "trainer, or it is damaged)");
    if (saved.at(key) != now.at(key)) {
      then += (then.empty() ? "" : ", ") + option_text(flag, saved.at(key));
      here += (here.empty() ? "" : ", ") + option_text(flag, now.at(key));
    }
  }
  if (!then.empty())
    throw loader::ValueError("--resume " + path + " is a checkpoint of a run with " + then + "; this run has " + here +
                             ": it only continues the run it came from (run with that run's options, or without "
                             "--resume to start afresh)");
}

/// Whether `v` (the contents of a --resume file) is a training checkpoint rather than a
/// plain state_dict (whose entries are all tensors).
bool is_training_checkpoint(const loader::Value& v) {
  return v.is_dict() && v.contains("model") && v.contains("optimizer") && v.contains("loader") && v.contains("config");
}

/// Replaces `path` with `bytes` so that a kill or a power cut at any moment leaves the
/// old file or the new one, whole: write path.tmp, fsync it, rename it over `path`,
/// fsync the directory (which makes the rename durable).
void replace_file_durably(const std::string& path, const std::string& bytes) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    throw loader::RuntimeError("cannot create the checkpoint " + tmp + ": " + std::strerror(errno) +
                               " (does its directory exist and is it writable?)");
  auto fail = [&](const std::string& what) {
    const std::string err = std::strerror(errno);
    ::close(fd);
    ::unlink(tmp.c_str());
    throw loader::RuntimeError(what + " the checkpoint " + tmp + " failed: " + err + " (is the disk full?); " + path +
                               " still holds the previous checkpoint");
  };
  for (size_t done = 0; done < bytes.size();) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail("writing");
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) fail("syncing");
  if (::close(fd) != 0) {
    const std::string err = std::strerror(errno);
    ::unlink(tmp.c_str());
    throw loader::RuntimeError("closing the checkpoint " + tmp + " failed: " + err);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string err = std::strerror(errno);
    ::unlink(tmp.c_str());
    throw loader::RuntimeError("cannot rename the checkpoint " + tmp + " to " + path + ": " + err);
  }
  const size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);  // best effort: some file systems refuse fsync on a directory
    ::close(dfd);
  }
}

/// The running sums of the epoch in progress, which its printed figures come from.
struct EpochTotals {
  double loss_sum = 0;
  int64_t seen = 0, correct = 0, done = 0;
};

/// Writes the training checkpoint (see the top of the file) to `path`.
void save_training_checkpoint(const std::string& path, MLP& model, const Options& opt, const Adam& adam,
                              const SGD& sgd, int64_t step, double total_steps, int epoch, loader::Value loader_state,
                              const EpochTotals& totals) {
  loader::pt::SaveOptions so;
  so.states.push_back(state_dict_with_metadata(model));
  // torch.save(ck, path) names the archive after the file; the temporary name must not leak in.
  const size_t slash = path.find_last_of('/');
  std::string stem = path.substr(slash == std::string::npos ? 0 : slash + 1);
  if (stem.rfind('.') != std::string::npos) stem.resize(stem.rfind('.'));
  so.archive_name = stem.empty() ? "archive" : stem;
  const loader::Value ck = loader::Value::dict(
      {{"model", so.states.back().object},
       {"optimizer", optimizer_state_dict(model, opt, adam, sgd, lr_at(opt, step, total_steps))},
       {"step", step},
       {"epoch", epoch},
       {"loader", std::move(loader_state)},
       {"epoch_totals", loader::Value::dict({{"loss_sum", float_value(totals.loss_sum)},
                                             {"samples", totals.seen},
                                             {"correct", totals.correct},
                                             {"batches", totals.done}})},
       {"config", config_of(opt)}});
  replace_file_durably(path, loader::pt::save_bytes(ck, so));
}

/// int(ck[key]) of a training checkpoint, in [lo, hi].
int64_t checkpoint_int(const loader::Value& ck, const std::string& key, int64_t lo, int64_t hi, const std::string& path) {
  if (!ck.contains(key) || !ck.at(key).is_int() || ck.at(key).to_int() < lo || ck.at(key).to_int() > hi)
    throw loader::ValueError(path + ": \"" + key + "\" is " + (ck.contains(key) ? ck.at(key).repr() : "missing") +
                             ", expected an int in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                             "] (the file is damaged, or not a checkpoint of this trainer)");
  return ck.at(key).to_int();
}

// ------------------------------------------------------------------ evaluation
struct TestSet {
  RowMatrix images;  // [10000, 784], pixel / 255
  std::vector<int64_t> labels;
};

TestSet load_test_set(const std::string& root) {
  loader::FashionMNIST test(root, /*train=*/false);
  TestSet t;
  t.images.resize(test.size(), 784);
  t.labels.resize(static_cast<size_t>(test.size()));
  for (int64_t i = 0; i < test.size(); ++i) {
    void* leaves[2] = {t.images.row(i).data(), &t.labels[static_cast<size_t>(i)]};
    test.get_into(i, leaves);
  }
  return t;
}

/// --image-folder: the test ImageFolder (mode L, ToTensor only): pixel / 255, as the IDX path.
TestSet load_image_test_set(const std::string& dir) {
  auto test = loader::make_dataset(
      {"image_folder", loader::Value::dict({{"root", dir},
                                            {"mode", "L"},
                                            {"transform", loader::Value::list({loader::Value::dict({{"name", "ToTensor"}})})}})});
  TestSet t;
  t.images.resize(test->size(), 784);
  t.labels.resize(static_cast<size_t>(test->size()));
  for (int64_t i = 0; i < test->size(); ++i) {
    const loader::Value s = test->get(i);
    const loader::Tensor image = s[0].to_tensor().contiguous();
    if (image.dtype() != loader::DType::Float32 || image.numel() != 784)
      throw loader::ValueError(dir + ": sample " + std::to_string(i) + " is " + s[0].repr().substr(0, 120) +
                               ", expected a 28x28 grayscale image (float32 [1, 28, 28] after ToTensor)");
    std::memcpy(t.images.row(i).data(), image.data<float>(), 784 * sizeof(float));
    t.labels[static_cast<size_t>(i)] = s[1].to_int();
    if (t.labels[static_cast<size_t>(i)] < 0 || t.labels[static_cast<size_t>(i)] >= loader::FashionMNIST::kNumClasses)
      throw loader::ValueError(dir + ": more than 10 class folders (sample " + std::to_string(i) + " has class " +
                               std::to_string(t.labels[static_cast<size_t>(i)]) + ")");
  }
  return t;
}

/// --image-folder: the training pipeline for --augment.
loader::Value train_transform(const std::string& augment) {
  using loader::Value;
  std::vector<Value> steps;
  if (augment == "flip") steps.push_back(Value::dict({{"name", "RandomHorizontalFlip"}}));
  if (augment == "crop")
    steps.push_back(Value::dict({{"name", "RandomResizedCrop"},
                                 {"size", int64_t{28}},
                                 {"scale", Value::list({Value(0.8), Value(1.0)})}}));
  steps.push_back(Value::dict({{"name", "ToTensor"}}));
  return Value::list(std::move(steps));
}

double accuracy(MLP& model, const TestSet& t) {
  int64_t correct = 0;
  const Eigen::Index n = t.images.rows(), chunk = 2000;
  for (Eigen::Index s = 0; s < n; s += chunk) {
    const Eigen::Index b = std::min(chunk, n - s);
    const RowMatrix& logits = model.forward(t.images.middleRows(s, b));
    for (Eigen::Index r = 0; r < b; ++r) {
      Eigen::Index arg;
      logits.row(r).maxCoeff(&arg);
      correct += arg == t.labels[static_cast<size_t>(s + r)];
    }
  }
  return static_cast<double>(correct) / static_cast<double>(n);
}

// ------------------------------------------------------------------ progress
class Progress {
 public:
  Progress(bool enabled, int epoch, int epochs, int64_t batches)
      : enabled_(enabled), epoch_(epoch), epochs_(epochs), batches_(batches), t0_(Clock::now()) {}
  /// `it`'s stats (the time spent in next()) are read only when the line is redrawn.
  void update(int64_t done, int64_t samples, double loss, const loader::DataLoader::Iterator& it) {
    if (!enabled_) return;
    auto now = Clock::now();
    if (done != batches_ && now - last_ < std::chrono::milliseconds(100)) return;
    last_ = now;
    const double wait_s = it.stats().next_s;
    const int width = 30;
    const int64_t filled = batches_ > 0 ? done * width / batches_ : width;
    const double el = seconds_since(t0_);
    std::string bar(static_cast<size_t>(filled), '#');
    bar.resize(width, '.');
    std::printf("\r\033[Kepoch %d/%d [%s] %3d%%  loss %.4f  %.0f samples/s  waited %.2f s",
                epoch_, epochs_, bar.c_str(), static_cast<int>(batches_ > 0 ? 100 * done / batches_ : 100),
                loss, el > 0 ? static_cast<double>(samples) / el : 0.0, wait_s);
    std::fflush(stdout);
  }
  void clear() {
    if (!enabled_) return;
    std::printf("\r\033[K");
    std::fflush(stdout);
  }

 private:
  bool enabled_;
  int epoch_, epochs_;
  int64_t batches_;
  Clock::time_point t0_, last_;
};

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
#ifdef LOADER_DEMO_OPENBLAS
  if (opt.threads > 0) openblas_set_num_threads(opt.threads);
#endif
  const bool show_progress = opt.progress >= 0 ? opt.progress == 1 : ::isatty(STDOUT_FILENO) == 1;

  // torch.manual_seed(seed); model = nn.Sequential(...): the same draws, the same weights.
  loader::manual_seed(opt.seed);
  MLP model(784, opt.hidden, loader::FashionMNIST::kNumClasses);
  model.reset_parameters(loader::default_generator());
  Adam adam(opt.lr);
  SGD sgd(opt.lr, opt.momentum);
  // A training checkpoint (--checkpoint) goes on where it was taken; a plain state_dict
  // only gives the starting weights.
  std::optional<loader::Value> resumed;
  if (!opt.resume.empty()) {
    loader::Value file = loader::pt::load(opt.resume);
    if (is_training_checkpoint(file)) {
      check_config(file.at("config"), opt, opt.resume);
      load_state_dict(model, file.at("model"), opt.resume + " [\"model\"]");
      load_optimizer_state(file.at("optimizer"), model, opt, adam, sgd, opt.resume + " [\"optimizer\"]");
      resumed = std::move(file);
    } else {
      load_state_dict(model, file, opt.resume);
      std::printf("resumed from %s\n", opt.resume.c_str());
    }
  }

  std::shared_ptr<loader::Dataset> train_set;
  TestSet test;
  if (opt.image_folder.empty()) {
    train_set = loader::make_dataset({"fashion_mnist", loader::Value::dict({{"root", opt.root}, {"train", true}})});
    test = load_test_set(opt.root);
  } else {
    train_set = loader::make_dataset({"image_folder", loader::Value::dict({{"root", opt.image_folder + "/train"},
                                                                           {"mode", "L"},
                                                                           {"transform", train_transform(opt.augment)}})});
    test = load_image_test_set(opt.image_folder + "/test");
  }

  loader::DataLoaderOptions lo;
  lo.batch_size = opt.batch_size;
  // Shuffle with a generator of its own (PyTorch: RandomSampler(ds, generator=g) with
  // g.manual_seed(seed)), so the data order, and with it the trained weights, are the
  // same whatever --workers is: the loader's base_seed draws (once per epoch, or once
  // with persistent workers) come from the default generator and do not touch it.
  // --train-samples N: RandomSampler(train_set, num_samples=N, generator=g).
  lo.sampler = std::make_shared<loader::RandomSampler>(
      train_set, /*replacement=*/false,
      opt.train_samples > 0 ? std::optional<int64_t>(opt.train_samples) : std::nullopt,
      std::make_shared<loader::Generator>(opt.seed));
  lo.num_workers = opt.workers;
  lo.persistent_workers = opt.workers > 0;
  // The augmentation's draws depend on the task only (not on which worker ran it): the
  // same batches, and the same trained weights, for any --workers.
  if (!opt.image_folder.empty()) lo.worker_seeding = loader::WorkerSeeding::PerTask;
  loader::DataLoader loader(train_set, lo);
  const int64_t batches = loader.size();
  const double total_steps = static_cast<double>(batches) * opt.epochs;

  int64_t step = 0;
  int first_epoch = 1;
  EpochTotals resumed_totals;
  if (resumed) {
    const loader::Value& ck = *resumed;
    step = checkpoint_int(ck, "step", 1, batches * opt.epochs, opt.resume);
    first_epoch = static_cast<int>(checkpoint_int(ck, "epoch", (step - 1) / batches + 1, (step - 1) / batches + 1, opt.resume));
    if (opt.optimizer == "adam" && adam.steps() != step)
      throw loader::ValueError(opt.resume + ": the optimizer has taken " + std::to_string(adam.steps()) +
                               " steps, the checkpoint says " + std::to_string(step) + " (the file is damaged)");
    if (ck.contains("epoch_totals") && ck.at("epoch_totals").is_dict()) {
      const loader::Value& t = ck.at("epoch_totals");
      resumed_totals.loss_sum = float_of(t.get("loss_sum", 0.0), opt.resume + ": [\"epoch_totals\"][\"loss_sum\"]");
      resumed_totals.seen = t.get("samples", 0).to_int();
      resumed_totals.correct = t.get("correct", 0).to_int();
      resumed_totals.done = t.get("batches", 0).to_int();
    }
    // The shuffle generator, the default generator and the place in the epoch.  --workers
    // does not change the batches (the dataset draws nothing at random), so a checkpoint
    // of another worker count is taken as well (strict = false), as the same batches.
    const loader::Value& saved = ck.at("config");
    const bool same_workers = saved.contains("workers") && saved.at("workers") == loader::Value(opt.workers);
    try {
      loader.load_state_dict(ck.at("loader"), /*strict=*/same_workers);
    } catch (const loader::Error& e) {
      throw loader::ValueError(opt.resume + " [\"loader\"]: " + e.what());
    }
    std::printf("resumed from %s: epoch %d, step %lld of %lld (weights, optimizer state, learning-rate schedule and "
                "data order go on from there)\n",
                opt.resume.c_str(), first_epoch, static_cast<long long>(step), static_cast<long long>(total_steps));
  }
  const int64_t checkpoint_every = opt.checkpoint_every > 0 ? opt.checkpoint_every : batches;
  std::printf("Fashion-MNIST%s: %lld training / %lld test images; MLP 784-",
              opt.image_folder.empty() ? "" : (" (PNG files in " + opt.image_folder + ", augment " + opt.augment + ")").c_str(),
              static_cast<long long>(train_set->size()), static_cast<long long>(test.images.rows()));
  for (int64_t h : opt.hidden) std::printf("%lld-", static_cast<long long>(h));
  std::printf("10, %s lr %g, batch %lld, %d worker%s, %lld batches per epoch\n", opt.optimizer.c_str(), opt.lr,
              static_cast<long long>(opt.batch_size), opt.workers, opt.workers == 1 ? "" : "s",
              static_cast<long long>(batches));
  if (!opt.checkpoint.empty())
    std::printf("checkpoints: %s every %lld steps\n", opt.checkpoint.c_str(), static_cast<long long>(checkpoint_every));
  std::fflush(stdout);

  RowMatrix dlogits;
  double train_seconds = 0, wait_seconds = 0, last_loss = std::nan("");
  int64_t samples_total = 0;
  double acc = accuracy(model, test);
  if (opt.epochs == 0) std::printf("test accuracy %.4f (no training: --epochs 0)\n", acc);

  FILE* log = nullptr;
  if (!opt.log.empty()) {
    // A resumed run keeps the lines of the epochs before the one it goes on with.
    std::string kept;
    if (resumed) {
      if (FILE* old = std::fopen(opt.log.c_str(), "r")) {
        char line[4096];
        int e = 0;
        while (std::fgets(line, sizeof line, old))
          if (std::sscanf(line, "{\"epoch\": %d", &e) == 1 && e < first_epoch) kept += line;
        std::fclose(old);
      }
    }
    log = std::fopen(opt.log.c_str(), "w");
    if (!log) throw loader::ValueError("cannot write the log " + opt.log + ": " + std::strerror(errno));
    std::fputs(kept.c_str(), log);
  }
  struct LogCloser {
    FILE*& f;
    ~LogCloser() {
      if (f) std::fclose(f);
    }
  } log_closer{log};

  for (int epoch = first_epoch; epoch <= opt.epochs; ++epoch) {
    Progress progress(show_progress, epoch, opt.epochs, batches);
    const auto t_epoch = Clock::now();
    // A resumed epoch goes on with the sums it had (its figures then match an
    // uninterrupted run's; its timings count from the restart).
    const EpochTotals start = resumed && epoch == first_epoch ? resumed_totals : EpochTotals{};
    double loss_sum = start.loss_sum, lr = opt.lr;
    int64_t seen = start.seen, done = start.done, correct = start.correct;
    const int64_t seen_before = start.seen;
    auto it = loader.iter();  // after load_state_dict: the rest of the checkpointed epoch
    for (;;) {
      std::optional<loader::Value> batch = it.next();
      if (!batch) break;
      const loader::Tensor images = (*batch)[0].to_tensor().contiguous();
      const loader::Tensor labels = (*batch)[1].to_tensor().contiguous();
      const int64_t b = images.size(0);
      if (images.dtype() != loader::DType::Float32 || images.numel() != b * 784 || labels.numel() != b)
        throw loader::ValueError("unexpected batch " + batch->repr().substr(0, 200) +
                                 ": expected [float32 [B, 1, 28, 28], int64 [B]]");
      Eigen::Map<const RowMatrix> x(images.data<float>(), b, 784);
      // CosineAnnealingLR(T_max = all steps), stepped after every batch.
      lr = lr_at(opt, step, total_steps);
      ++step;
      adam.set_lr(lr);
      sgd.set_lr(lr);
      const RowMatrix& logits = model.forward(x);
      const int64_t* y = labels.data<int64_t>();
      for (Eigen::Index r = 0; r < logits.rows(); ++r) {
        Eigen::Index arg;
        logits.row(r).maxCoeff(&arg);
        correct += arg == y[r];
      }
      loss_sum += cross_entropy(logits, y, dlogits) * static_cast<double>(b);
      model.backward(x, dlogits);
      if (opt.optimizer == "adam") adam.step(model);
      else sgd.step(model);
      seen += b;
      ++done;
      // After the step, with the loader's state after this batch: a resumed run starts
      // with the next one.
      if (!opt.checkpoint.empty() && step % checkpoint_every == 0)
        save_training_checkpoint(opt.checkpoint, model, opt, adam, sgd, step, total_steps, epoch, it.state_dict(),
                                 {loss_sum, seen, correct, done});
      progress.update(done, seen - seen_before, loss_sum / static_cast<double>(seen), it);
    }
    const double epoch_seconds = seconds_since(t_epoch);
    // The time the trainer waited for data: the loader's own figure (EpochStats::next_s,
    // the time inside next()), not a clock of its own around it.
    const double epoch_wait = it.stats().next_s;
    progress.clear();
    train_seconds += epoch_seconds;
    wait_seconds += epoch_wait;
    const int64_t seen_now = seen - seen_before;  // samples trained in this process
    samples_total += seen_now;
    if (seen > 0) last_loss = loss_sum / static_cast<double>(seen);
    acc = accuracy(model, test);
    const double train_acc = seen > 0 ? static_cast<double>(correct) / static_cast<double>(seen) : 0.0;
    const double samples_per_s = static_cast<double>(seen_now) / epoch_seconds;
    std::printf("epoch %d/%d  loss %.4f  train_accuracy %.4f  test_accuracy %.4f  %.0f samples/s  "
                "waited for data %.2f s (%.0f%%)  %.1f s\n",
                epoch, opt.epochs, last_loss, train_acc, acc, samples_per_s, epoch_wait,
                100.0 * epoch_wait / epoch_seconds, epoch_seconds);
    std::fflush(stdout);
    if (log) {
      std::fprintf(log,
                   "{\"epoch\": %d, \"loss\": %.6f, \"train_accuracy\": %.4f, \"test_accuracy\": %.4f, "
                   "\"samples_per_s\": %.0f, \"data_wait_s\": %.4f, \"epoch_s\": %.4f, \"lr\": %.6g, "
                   "\"workers\": %d, \"batch_size\": %lld, \"data\": \"%s\", \"augment\": \"%s\"}\n",
                   epoch, last_loss, train_acc, acc, samples_per_s, epoch_wait, epoch_seconds, lr, opt.workers,
                   static_cast<long long>(opt.batch_size), opt.image_folder.empty() ? "idx" : "png-image-folder",
                   opt.augment.c_str());
      std::fflush(log);
    }
  }
  loader.shutdown();

  if (!opt.out.empty()) {
    save_state_dict(model, opt.out);
    std::printf("checkpoint: %s (state_dict of nn.Sequential(Flatten(), Linear(784,%lld), ReLU(), ...); "
                "load with demos/check_checkpoint.py)\n",
                opt.out.c_str(), static_cast<long long>(opt.hidden.empty() ? 10 : opt.hidden[0]));
  }
  const double total = seconds_since(t_start);
  char loss_text[32] = "null";
  if (!std::isnan(last_loss)) std::snprintf(loss_text, sizeof loss_text, "%.6f", last_loss);
  std::printf(
      "{\"test_accuracy\": %.4f, \"epochs\": %d, \"seconds\": %.2f, \"samples_per_s\": %.0f, "
      "\"train_loss\": %s, \"data_wait_s\": %.3f, \"train_seconds\": %.2f, \"workers\": %d, "
      "\"batch_size\": %lld, \"optimizer\": \"%s\", \"lr\": %g, \"seed\": %llu, \"data\": \"%s\", \"augment\": \"%s\", "
      "\"checkpoint\": %s}\n",
      acc, opt.epochs, total, train_seconds > 0 ? static_cast<double>(samples_total) / train_seconds : 0.0,
      loss_text, wait_seconds, train_seconds, opt.workers,
      static_cast<long long>(opt.batch_size), opt.optimizer.c_str(), opt.lr,
      static_cast<unsigned long long>(opt.seed), opt.image_folder.empty() ? "idx" : "png-image-folder",
      opt.augment.c_str(), opt.out.empty() ? "null" : json_string(opt.out).c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (auto rc = loader::runtime::run_worker_if_requested(argc, argv)) return *rc;
  Options opt = parse_args(argc, argv);
  try {
    return train(opt);
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::cerr << "fashion_mnist_train: " << e.what() << "\n";
    return 1;
  }
}
