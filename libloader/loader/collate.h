// Collation: turning a list of samples into a batch, with PyTorch's rules.
//
// default_collate (torch.utils.data.default_collate):
//   - tensors are stacked along a new first dimension (shapes must match);
//   - ints become an int64 tensor, floats a float64 tensor, bools a bool tensor
//     (the dtype follows the *first* element, as torch.tensor([...]) infers it);
//   - strings and bytes stay a list;
//   - dicts collate per key (keys from the first sample, order kept, type name kept);
//   - tuples/lists are transposed and collated per position (a tuple becomes a list,
//     a namedtuple keeps its type, a list subclass keeps its type name);
//   - anything else is a TypeError with PyTorch's message.
// Output tensors are allocated from `alloc` (or current_tensor_allocator()), which in a
// worker is its shared-memory slab: the batch is written once, where the main process
// reads it.
//
//   std::vector<loader::Value> samples = {...};
//   loader::Value batch = loader::default_collate(samples);
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "loader/registration.h"
#include "loader/value.h"

namespace loader {

/// A collate function: samples of one batch -> the batch.
using CollateFn = std::function<Value(std::vector<Value>& samples)>;

Value default_collate(std::vector<Value>& samples, TensorAllocator* alloc = nullptr);

/// torch.utils.data.default_convert: the batch_size=None path. Containers keep their
/// type; numbers and strings are left as they are; tensors pass through.
Value default_convert(Value sample);

// ---- named collate functions, so worker processes can find them
/// Registers a collate function under `name` (replacing an earlier one).
void register_collate_fn(const std::string& name, CollateFn fn);
/// Returns the registered function; ValueError naming the known ones when absent.
CollateFn find_collate_fn(const std::string& name);

namespace detail {
struct CollateRegistrar {
  CollateRegistrar(const char* name, CollateFn fn) { register_collate_fn(name, std::move(fn)); }
};
}  // namespace detail

/// Registers a collate function at static-initialisation time (see registration.h for
/// registrations in static libraries).
#define LOADER_REGISTER_COLLATE_FN(name, ...)                                                \
  static ::loader::detail::CollateRegistrar LOADER_UNIQUE_NAME(loader_collate_registrar_)( \
      name, ::loader::CollateFn(__VA_ARGS__))

}  // namespace loader
