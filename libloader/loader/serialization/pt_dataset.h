// A map-style dataset over the tensors of a `.pt` file: PyTorch's TensorDataset saved
// with torch.save as a tuple/list of equal-length tensors (`torch.save(ds.tensors, f)`)
// or a dict of them.  Sample i is a tuple (or, for dict files, a dict) of views t[i].
//
//   auto ds = std::make_shared<loader::pt::PtTensorDataset>("train.pt");
//   loader::Value s = ds->get(3);        // (features[3], labels[3])
//
//   // by registry, so that worker processes can rebuild it:
//   loader::pt::register_pt_datasets();
//   auto d = loader::make_dataset({"pt_tensor_dataset",
//       loader::Value::dict({{"path", "train.pt"}, {"keys", loader::Value::list({"x", "y"})}})});
//
// Parameters of "pt_tensor_dataset": "path" (str, required); "keys" (list of str for a
// dict file, of int indices for a tuple/list file: which tensors, in which order;
// default all); "mmap" (bool, default true); "verify_crc" (bool, default false: with
// mmap a CRC check reads every page, in every worker).
//
// With mmap the storages are the file's pages (MemoryKind::FileMapping, copy-on-write):
// worker processes share them through the page cache instead of each holding a copy.
#pragma once

#include <string>
#include <vector>

#include <memory>

#include "loader/dataset.h"
#include "loader/datasets.h"
#include "loader/serialization/pt.h"

namespace loader::pt {

class PtTensorDataset : public Dataset {
 public:
  struct Options {
    std::vector<Value> keys;  ///< str keys (dict file) or int indices (tuple/list file)
    bool mmap = true;
    bool verify_crc = false;
  };
  explicit PtTensorDataset(const std::string& path);
  PtTensorDataset(const std::string& path, Options options);

  Value get(int64_t index) override;
  int64_t size() const override { return size_; }
  /// A tuple/list file is served as a TensorDataset over its tensors: each sample is
  /// written straight into its batch row, and a batch's rows are gathered in one loop
  /// (TensorDataset::get_batch_into).  A dict file gives dicts, through get().
  std::optional<Value> sample_spec() const override;
  void get_into(int64_t index, void* const* leaves) override;
  void get_batch_into(const IndexBatch& indices, const BatchRows& rows) override;

  const std::vector<Tensor>& tensors() const noexcept { return tensors_; }
  /// The dict keys of the served tensors (dict files); empty for tuple/list files.
  const std::vector<Value>& keys() const noexcept { return keys_; }
  bool is_dict() const noexcept { return dict_; }

 private:
  std::string path_;
  std::vector<Tensor> tensors_;
  std::vector<Value> keys_;
  bool dict_ = false;
  int64_t size_ = 0;
  std::unique_ptr<TensorDataset> rows_;  ///< tuple/list files: the fast paths
};

/// Registers "pt_tensor_dataset" (idempotent).  The .cpp also registers it statically,
/// but a static library may drop that object file; call this to be sure.
void register_pt_datasets();

}  // namespace loader::pt
