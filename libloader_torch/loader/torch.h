// libtorch adapter: loader batches as torch::Tensor, without a copy.
//
//   #include "loader/torch.h"            // CMake target loader_torch (built when libtorch is found)
//
//   for (loader::Value& batch : dl) {    // [float32[B, 1, 28, 28], int64[B]] from the workers
//     std::vector<torch::Tensor> xy = loader::to_torch_list(batch);
//     torch::Tensor loss = torch::nll_loss(model->forward(xy[0]), xy[1]);
//     ...
//   }                                    // the slab goes back to its worker when the last view dies
//
//   loader::pt::save(loader::torch_state_dict(*model), "model.pt");   // Python's torch.load reads it
//
// Zero copy, both ways:
//  - to_torch(t) is a torch tensor over t's bytes: data_ptr() equals t.data_ptr(), and its
//    storage's deleter holds t's loader::Storage.  A batch that came from a worker lives
//    in a shared-memory slab; that slab goes back to its worker only when every loader
//    view and every torch tensor made from the batch is gone (so it is never refilled
//    under a torch tensor).  Writes through the torch tensor change the batch.
//  - from_torch(t) is a loader::Tensor over a CPU torch tensor's storage, which it keeps
//    alive; torch_state_dict() uses it to hand a module's weights to loader::pt::save.
//
// Pinned batches: the torch tensor is an ordinary CPU tensor over the same memory; the
// adapter marks nothing.  torch's is_pinned() asks the CUDA runtime about the pointer
// itself, so it says true exactly when libtorch has CUDA and the slab is CUDA-registered
// (pin_memory=true on a machine with a GPU), and false otherwise, e.g. for an mlock'ed
// slab (see docs/gpu.md).
//
// Every function may be called from any thread; a torch tensor made by to_torch may be
// destroyed on any thread.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>
#include <torch/ordered_dict.h>

#include <string>
#include <vector>

#include "loader/dtype.h"
#include "loader/tensor.h"
#include "loader/value.h"

namespace torch::nn {
class Module;
}  // namespace torch::nn

namespace loader {

// ------------------------------------------------------------------ element types
/// The torch element type of a loader dtype: every loader dtype has one (Complex64 is
/// torch.complex64 = c10::kComplexFloat).
c10::ScalarType to_torch_dtype(DType dtype);
/// The loader dtype of a torch element type; TypeError for those loader lacks
/// (complex128, quantized types, ...), naming the type.
DType from_torch_dtype(c10::ScalarType type);

// ------------------------------------------------------------------ loader -> torch
/// A CPU torch tensor viewing `t`'s elements (same sizes, strides, dtype; requires_grad
/// false).  No copy: to_torch(t).data_ptr() == t.data_ptr().  The torch tensor holds
/// t's storage until its own storage dies.  ValueError for an undefined tensor.
at::Tensor to_torch(const Tensor& t);

/// A batch of tensors as a vector: a list or tuple whose items are all tensors (a
/// single tensor gives a vector of one).  TypeError naming the first item that is not
/// a tensor (use to_ivalue for batches that carry numbers or strings).
std::vector<at::Tensor> to_torch_list(const Value& batch);

/// A string-keyed dict of tensors (a batch of dict samples), in the dict's order.
/// TypeError naming the first key or value that does not fit.
torch::OrderedDict<std::string, at::Tensor> to_torch_dict(const Value& batch);

/// Any nested batch as libtorch's own nested type (what a TorchScript module takes):
///   None -> None, bool -> bool, int -> int, float -> float, str and bytes -> str,
///   Tensor -> Tensor (to_torch), list -> List[Tensor] when every item is a tensor,
///   else List[Any], tuple and namedtuple -> Tuple (field names are not kept),
///   dict with str (or int) keys -> Dict[str (int), Tensor or Any] in the dict's order.
/// TypeError for a custom object or a dict with other keys, naming where it sits.
c10::IValue to_ivalue(const Value& batch);

// ------------------------------------------------------------------ torch -> loader
/// A loader tensor viewing a CPU, strided torch tensor's elements (same sizes, strides,
/// storage offset); the loader storage spans the torch storage and keeps it alive.
/// is_pinned() is torch's answer for the tensor.  ValueError for an undefined, non-CPU
/// or non-strided tensor; TypeError for an element type loader lacks.
Tensor from_torch(const at::Tensor& t);

/// Python's module.state_dict(): every parameter and buffer, named as libtorch names
/// them ("0.weight" in a Sequential, "fc1.bias" for a registered submodule), in
/// Python's order (a module's parameters, then its buffers, then its children), as
/// detached tensors sharing the module's memory (from_torch; tensors that share a
/// torch storage share one loader storage).  An OrderedDict Value, ready for
/// loader::pt::save; torch.load(path, weights_only=True) reads the file, and the
/// Python model with the same structure accepts it in load_state_dict(strict=True).
/// No `_metadata` is written: libtorch does not know Python's module versions.
Value torch_state_dict(const torch::nn::Module& module);

/// module.load_state_dict(state_dict, strict=True): copies every entry of
/// `state_dict` (a dict of tensors or Parameters, e.g. from loader::pt::load) into the
/// module's parameter or buffer of the same name, converting the dtype.  RuntimeError
/// with PyTorch's wording for missing or unexpected keys and for size mismatches
/// (nothing is copied then); TypeError when an entry is not a named tensor.
void load_torch_state_dict(torch::nn::Module& module, const Value& state_dict);

}  // namespace loader
