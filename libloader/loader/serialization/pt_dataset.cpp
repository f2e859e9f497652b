#include "loader/serialization/pt_dataset.h"

#include <mutex>

namespace loader::pt {

namespace {

std::string where(const std::string& path) { return "PtTensorDataset('" + path + "')"; }

Tensor served(const Value& v, const std::string& path, const std::string& what) {
  if (!is_tensor_like(v))
    throw TypeError(where(path) + ": " + what + " is a " + v.python_type() +
                    ", not a tensor; the file must hold a tuple, list or dict of tensors");
  const Tensor& t = tensor_of(v);
  if (t.dim() == 0)
    throw ValueError(where(path) + ": " + what + " is a 0-dim tensor; every tensor needs a first dimension to index");
  return t;
}

std::shared_ptr<Dataset> make_from_params(const Value& params) {
  if (!params.is_dict()) throw TypeError("pt_tensor_dataset: parameters must be a dict, got " + params.python_type());
  for (const auto& kv : params.dict_items()) {
    const std::string k = kv.first.is_string() ? kv.first.to_string() : "";
    if (k != "path" && k != "keys" && k != "mmap" && k != "verify_crc")
      throw ValueError("pt_tensor_dataset: unknown parameter " + kv.first.repr() +
                       " (known: path, keys, mmap, verify_crc)");
  }
  if (!params.contains("path") || !params.at("path").is_string())
    throw ValueError("pt_tensor_dataset: parameter \"path\" (a str) is required");
  PtTensorDataset::Options o;
  if (params.contains("keys")) {
    const Value& keys = params.at("keys");
    if (!keys.is_sequence()) throw TypeError("pt_tensor_dataset: \"keys\" must be a list, got " + keys.python_type());
    o.keys = keys.items();
  }
  if (params.contains("mmap")) o.mmap = params.at("mmap").to_bool();
  if (params.contains("verify_crc")) o.verify_crc = params.at("verify_crc").to_bool();
  return std::make_shared<PtTensorDataset>(params.at("path").to_string(), std::move(o));
}

}  // namespace

PtTensorDataset::PtTensorDataset(const std::string& path) : PtTensorDataset(path, Options{}) {}

PtTensorDataset::PtTensorDataset(const std::string& path, Options options) : path_(path) {
  LoadOptions lo;
  lo.mmap = options.mmap;
  lo.verify_crc = options.verify_crc;
  Value root = load(path, lo);
  if (root.is_dict()) {
    dict_ = true;
    if (options.keys.empty()) {
      for (const auto& kv : root.dict_items()) {
        keys_.push_back(kv.first);
        tensors_.push_back(served(kv.second, path, "entry " + kv.first.repr()));
      }
    } else {
      for (const Value& k : options.keys) {
        if (!k.is_string()) throw TypeError(where(path) + ": keys of a dict file must be str, got " + k.python_type());
        if (!root.contains(k.to_string()))
          throw KeyError(where(path) + ": the file has no entry '" + k.to_string() + "'");
        keys_.push_back(k);
        tensors_.push_back(served(root.at(k.to_string()), path, "entry '" + k.to_string() + "'"));
      }
    }
  } else if (root.is_sequence() && !is_tensor_like(root)) {
    const auto& items = root.items();
    if (options.keys.empty()) {
      for (size_t i = 0; i < items.size(); ++i) tensors_.push_back(served(items[i], path, "item " + std::to_string(i)));
    } else {
      for (const Value& k : options.keys) {
        if (!k.is_int()) throw TypeError(where(path) + ": keys of a tuple/list file must be int indices, got " + k.python_type());
        int64_t i = k.to_int();
        if (i < 0) i += static_cast<int64_t>(items.size());
        if (i < 0 || i >= static_cast<int64_t>(items.size()))
          throw IndexError(where(path) + ": index " + std::to_string(k.to_int()) + " is out of range for " +
                           std::to_string(items.size()) + " tensors");
        tensors_.push_back(served(items[static_cast<size_t>(i)], path, "item " + std::to_string(i)));
      }
    }
  } else if (is_tensor_like(root)) {
    tensors_.push_back(served(root, path, "the tensor"));
  } else {
    throw TypeError(where(path) + ": the file holds a " + root.python_type() +
                    "; expected a tuple, list or dict of tensors (e.g. torch.save(dataset.tensors, path))");
  }
  if (tensors_.empty()) throw ValueError(where(path) + ": the file holds no tensors");
  size_ = tensors_[0].size(0);
  for (const Tensor& t : tensors_)
    if (t.size(0) != size_) throw AssertionError("Size mismatch between tensors");
  if (!dict_) rows_ = std::make_unique<TensorDataset>(tensors_);
}

Value PtTensorDataset::get(int64_t requested) {
  const int64_t index = requested < 0 ? requested + size_ : requested;
  if (index < 0 || index >= size_)
    throw IndexError(where(path_) + ": index " + std::to_string(requested) + " is out of range for a dataset of size " +
                     std::to_string(size_));
  if (dict_) {
    std::vector<std::pair<Value, Value>> items;
    items.reserve(tensors_.size());
    for (size_t i = 0; i < tensors_.size(); ++i) items.emplace_back(keys_[i], Value(tensors_[i].select(0, index)));
    return Value::dict(std::move(items));
  }
  std::vector<Value> items;
  items.reserve(tensors_.size());
  for (const Tensor& t : tensors_) items.emplace_back(t.select(0, index));
  return Value::tuple(std::move(items));
}

std::optional<Value> PtTensorDataset::sample_spec() const {
  return rows_ ? rows_->sample_spec() : std::nullopt;
}

// The bounds are TensorDataset's, with torch's wording (the message torch's
// TensorDataset gives for tensor[index]).
void PtTensorDataset::get_into(int64_t index, void* const* leaves) {
  if (!rows_) return Dataset::get_into(index, leaves);
  rows_->get_into(index, leaves);
}

void PtTensorDataset::get_batch_into(const IndexBatch& indices, const BatchRows& rows) {
  if (!rows_) return Dataset::get_batch_into(indices, rows);
  rows_->get_batch_into(indices, rows);
}

void register_pt_datasets() {
  static std::once_flag once;
  std::call_once(once, [] { register_dataset("pt_tensor_dataset", make_from_params); });
}

LOADER_REGISTER_DATASET("pt_tensor_dataset", make_from_params);

}  // namespace loader::pt
