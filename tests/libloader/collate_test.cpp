// default_collate / default_convert against tests/golden/default_collate.json.
//
// The golden file records PyTorch's outputs; the inputs are the batches of
// make_golden.py::collate_golden, transcribed below case by case.  Cases built from numpy
// objects have no loader counterpart and are skipped with their reason printed.
#include "loader/collate.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "loader/error.h"
#include "test_util.h"

namespace loader {
namespace {

using nlohmann::json;
using Batch = std::vector<Value>;

json load_golden() {
  std::string text = testing::read_file(testing::golden_path("default_collate.json"));
  if (text.empty()) throw std::runtime_error("cannot read " + testing::golden_path("default_collate.json"));
  return json::parse(text);
}

// torch.tensor(...) equivalents.
Tensor f32(const std::vector<float>& v, const Dims& shape = {}) { return Tensor::from_vector<float>(v, shape); }
Tensor i64(const std::vector<int64_t>& v, const Dims& shape = {}) { return Tensor::from_vector<int64_t>(v, shape); }

class PlainObject : public CustomObject {
 public:
  std::string type_name() const override { return "object"; }
};

Value point(Value x, Value y) { return Value::namedtuple("Point", {"x", "y"}, {std::move(x), std::move(y)}); }

// make_golden.py's `cases` (collate) and `conv_cases` (convert), in C++.
std::map<std::string, std::function<Batch()>> collate_inputs() {
  return {
      {"ints", [] { return Batch{1, 2, -1}; }},
      {"floats", [] { return Batch{1.1, 2.3, -0.9}; }},
      {"bools", [] { return Batch{true, false}; }},
      {"int_then_float", [] { return Batch{1, 2.5}; }},
      {"float_then_int", [] { return Batch{2.5, 1}; }},
      {"strings", [] { return Batch{"a", "b", "c"}; }},
      {"bytes", [] { return Batch{Value::bytes("x"), Value::bytes("yz")}; }},
      {"tensors_f32_2x3", [] { return Batch{f32({0, 1, 2, 3, 4, 5}, {2, 3}), f32({6, 7, 8, 9, 10, 11}, {2, 3})}; }},
      {"tensors_0dim_i64", [] { return Batch{Tensor::scalar(int64_t{3}), Tensor::scalar(int64_t{4}), Tensor::scalar(int64_t{5})}; }},
      {"tensors_int32", [] { return Batch{Tensor::from_vector<int32_t>({1, 2}), Tensor::from_vector<int32_t>({3, 4})}; }},
      {"tensors_f16", [] { return Batch{f32({1.5f}).to(DType::Float16), f32({-2.0f}).to(DType::Float16)}; }},
      {"tensors_bool", [] { return Batch{Tensor::from_vector<bool>({true, false}), Tensor::from_vector<bool>({false, false})}; }},
      {"tensors_mixed_dtype_i64_f32", [] { return Batch{i64({1, 2}), f32({0.5f, 1.5f})}; }},
      {"tensors_noncontiguous", [] { return Batch{i64({1, 2, 3, 4}, {2, 2}).transpose(0, 1), i64({5, 6, 7, 8}, {2, 2}).transpose(0, 1)}; }},
      {"tuple_tensor_int", [] { return Batch{Value::tuple({f32({1, 2}), 0}), Value::tuple({f32({3, 4}), 1})}; }},
      {"list_of_lists", [] { return Batch{Value::list({1, 2, 3}), Value::list({4, 5, 6})}; }},
      {"dict_nested",
       [] {
         return Batch{Value::dict({{"a", f32({1})}, {"b", Value::dict({{"c", 1}, {"d", "x"}})}, {"e", Value::list({1, 2.0})}}),
                      Value::dict({{"a", f32({2})}, {"b", Value::dict({{"c", 2}, {"d", "y"}})}, {"e", Value::list({3, 4.0})}})};
       }},
      {"dict_of_tuple_of_list",
       [] {
         auto s = [](int64_t k, int64_t a, int64_t b) {
           return Value::dict({{"k", Value::tuple({k, Value::list({Tensor::scalar(a), Tensor::scalar(b)})})}});
         };
         return Batch{s(1, 1, 2), s(2, 3, 4)};
       }},
      {"namedtuple", [] { return Batch{point(1, f32({1})), point(2, f32({2}))}; }},
      {"custom_list_keeps_type", [] { return Batch{Value::list({1, 2, 3}, "CustomList"), Value::list({4, 5, 6}, "CustomList")}; }},
      {"custom_dict_keeps_type",
       [] {
         return Batch{Value::dict({{Value("a"), 1}, {Value("b"), 2}}, "CustomDict"),
                      Value::dict({{Value("a"), 3}, {Value("b"), 4}}, "CustomDict")};
       }},
      // range(2) has no Value kind; a C++ sample holds the plain list [0, 1] it stands for.
      {"ranges_become_list", [] { return Batch{Value::list({0, 1}), Value::list({0, 1})}; }},
      {"batch_of_one", [] { return Batch{Value::dict({{"x", i64({1, 2}, {1, 2})}})}; }},
      {"empty_tensors", [] { return Batch{Tensor::empty({0}, DType::Float32), Tensor::empty({0}, DType::Float32)}; }},
      {"err_unequal_lists", [] { return Batch{Value::list({"X"}), Value::list({"X", "X"})}; }},
      {"err_unequal_tensor_shapes", [] { return Batch{i64({1, 2}), i64({1, 2, 3})}; }},
      {"err_object",
       [] { return Batch{Value::object(std::make_shared<PlainObject>()), Value::object(std::make_shared<PlainObject>())}; }},
      {"err_none", [] { return Batch{Value(), Value()}; }},
  };
}

std::map<std::string, std::function<Value()>> convert_inputs() {
  return {
      {"int", [] { return Value(3); }},
      {"float", [] { return Value(2.5); }},
      {"tensor", [] { return Value(i64({1, 2})); }},
      {"list_of_ints", [] { return Value::list({1, 2}); }},
      {"dict", [] { return Value::dict({{"a", 1}, {"b", Value::list({2, 3})}}); }},
      {"tuple", [] { return Value::tuple({1, "x"}); }},
      {"namedtuple", [] { return point(1, 2); }},
      {"range", [] { return Value::list({0, 1}); }},  // range(2), see ranges_become_list
      {"custom_list", [] { return Value::list({1, 2, 3}, "CustomList"); }},
      {"custom_dict", [] { return Value::dict({{Value("a"), 1}}, "CustomDict"); }},
      {"str", [] { return Value("s"); }},
  };
}

bool numpy_case(const std::string& name) {
  return name.rfind("numpy", 0) == 0 || name.rfind("err_numpy", 0) == 0 || name == "list_of_numpy";
}

void flatten(const json& j, std::vector<double>& out) {
  if (j.is_array()) {
    for (const auto& x : j) flatten(x, out);
  } else if (j.is_boolean()) {
    out.push_back(j.get<bool>() ? 1.0 : 0.0);
  } else {
    out.push_back(j.get<double>());
  }
}

// Compares `got` with a golden {kind, ...} tree; failures name the path.
void expect_tree(const json& want, const Value& got, const std::string& path) {
  SCOPED_TRACE(path);
  const std::string kind = want.at("kind").get<std::string>();
  if (kind == "tensor") {
    ASSERT_TRUE(got.is_tensor()) << "got " << got.repr();
    const Tensor& t = got.to_tensor();
    EXPECT_EQ(dtype_name(t.dtype()), want.at("dtype").get<std::string>());
    EXPECT_EQ(t.sizes().vec(), want.at("shape").get<std::vector<int64_t>>());
    EXPECT_TRUE(t.is_contiguous());
    std::vector<double> values;
    flatten(want.at("values"), values);
    EXPECT_EQ(t.to_double_vector(), values);
  } else if (kind == "int") {
    ASSERT_TRUE(got.is_int()) << got.repr();
    EXPECT_EQ(got.to_int(), want.at("value").get<int64_t>());
  } else if (kind == "float") {
    ASSERT_TRUE(got.is_double()) << got.repr();
    EXPECT_EQ(got.to_double(), want.at("value").get<double>());
  } else if (kind == "bool") {
    ASSERT_TRUE(got.is_bool()) << got.repr();
    EXPECT_EQ(got.to_bool(), want.at("value").get<bool>());
  } else if (kind == "str") {
    ASSERT_TRUE(got.is_string()) << got.repr();
    EXPECT_EQ(got.to_string(), want.at("value").get<std::string>());
  } else if (kind == "bytes") {
    ASSERT_TRUE(got.is_bytes()) << got.repr();
    static const char* hex = "0123456789abcdef";
    std::string h;
    for (unsigned char c : got.to_string()) h += std::string{hex[c >> 4], hex[c & 15]};
    EXPECT_EQ(h, want.at("hex").get<std::string>());
  } else if (kind == "None") {
    EXPECT_TRUE(got.is_none()) << got.repr();
  } else if (kind == "namedtuple") {
    ASSERT_TRUE(got.is_tuple()) << got.repr();
    EXPECT_EQ(got.type_name(), want.at("type").get<std::string>());
    EXPECT_EQ(got.field_names(), want.at("fields").get<std::vector<std::string>>());
    const auto& items = want.at("items");
    ASSERT_EQ(got.size(), items.size());
    for (size_t i = 0; i < items.size(); ++i) expect_tree(items[i], got.items()[i], path + "." + std::to_string(i));
  } else {
    // "list", "dict", or a subclass name ("CustomList", "CustomDict"): a dict's items are
    // [key, value] pairs.
    const auto& items = want.at("items");
    const bool is_map = kind == "dict" || (!items.empty() && items[0].is_array());
    const std::string type_name = (kind == "list" || kind == "dict") ? "" : kind;
    if (is_map) {
      ASSERT_TRUE(got.is_dict()) << "expected " << kind << ", got " << got.repr();
      EXPECT_EQ(got.type_name(), type_name);
      ASSERT_EQ(got.size(), items.size());
      for (size_t i = 0; i < items.size(); ++i) {
        const auto& [key, value] = got.dict_items()[i];
        EXPECT_EQ(key.to_string(), items[i][0].get<std::string>());
        expect_tree(items[i][1], value, path + "." + items[i][0].get<std::string>());
      }
    } else {
      ASSERT_TRUE(got.is_list()) << "expected " << kind << ", got " << got.repr();
      EXPECT_EQ(got.type_name(), type_name);
      ASSERT_EQ(got.size(), items.size());
      for (size_t i = 0; i < items.size(); ++i) expect_tree(items[i], got.items()[i], path + "." + std::to_string(i));
    }
  }
}

TEST(DefaultCollate, MatchesPyTorchForEveryGoldenCase) {
  const json golden = load_golden();
  const auto inputs = collate_inputs();
  int ran = 0, skipped = 0;
  for (const auto& [name, expected] : golden.at("collate").items()) {
    SCOPED_TRACE("case " + name);
    auto it = inputs.find(name);
    if (it == inputs.end()) {
      if (numpy_case(name)) {
        std::printf("  skipped golden case %s: built from numpy objects, which loader has no counterpart for\n",
                    name.c_str());
        ++skipped;
        continue;
      }
      ADD_FAILURE() << "golden case " << name << " has no C++ input: add it to collate_inputs()";
      continue;
    }
    Batch batch = it->second();
    ++ran;
    if (expected.at("ok").get<bool>()) {
      Value out;
      ASSERT_NO_THROW(out = default_collate(batch));
      expect_tree(expected.at("output"), out, name);
    } else {
      try {
        Value out = default_collate(batch);
        ADD_FAILURE() << "expected " << expected.at("error_type") << ", got " << out.repr();
      } catch (const Error& e) {
        EXPECT_EQ(e.python_type(), expected.at("error_type").get<std::string>());
        EXPECT_EQ(std::string(e.what()), expected.at("error_message").get<std::string>());
      }
    }
  }
  std::printf("  default_collate golden cases: %d ran, %d skipped\n", ran, skipped);
  EXPECT_GT(ran, 0);
  EXPECT_EQ(static_cast<size_t>(ran), inputs.size()) << "every transcribed input has a golden case";
}

TEST(DefaultCollate, D63_InTheMainProcessTheBatchIsNotInSharedMemory) {
  // test_default_collate_shared_tensor, main-process half (the worker half:
  // WorkerCore.SlabTooSmallGivesNeedAndALargerOneGivesTheResult, WorkerProcesses.
  // BatchesAreZeroCopyViewsOfSharedMemory).
  Tensor t = Tensor::zeros({1}, DType::Float32);
  EXPECT_FALSE(t.is_shared());
  std::vector<Value> batch{Value(t)};
  EXPECT_FALSE(default_collate(batch).to_tensor().is_shared());
}

TEST(DefaultConvert, MatchesPyTorchForEveryGoldenCase) {
  const json golden = load_golden();
  const auto inputs = convert_inputs();
  int ran = 0, skipped = 0;
  for (const auto& [name, expected] : golden.at("convert").items()) {
    SCOPED_TRACE("convert case " + name);
    auto it = inputs.find(name);
    if (it == inputs.end()) {
      if (numpy_case(name)) {
        std::printf("  skipped golden convert case %s: numpy input\n", name.c_str());
        ++skipped;
        continue;
      }
      ADD_FAILURE() << "golden convert case " << name << " has no C++ input";
      continue;
    }
    ++ran;
    ASSERT_TRUE(expected.at("ok").get<bool>());
    expect_tree(expected.at("output"), default_convert(it->second()), name);
  }
  std::printf("  default_convert golden cases: %d ran, %d skipped\n", ran, skipped);
  EXPECT_GT(ran, 0);
  EXPECT_EQ(static_cast<size_t>(ran), inputs.size());
}

TEST(DefaultConvert, BuildsNewContainersAndKeepsTensorsShared) {
  Tensor t = i64({1, 2});
  Value in = Value::dict({{"t", t}, {"l", Value::list({1})}});
  Value out = default_convert(in);
  Value list = out.at("l");  // shares the output's list
  list.items().front() = Value(9);
  EXPECT_EQ(out.at("l")[0].to_int(), 9);
  EXPECT_EQ(in.at("l")[0].to_int(), 1);  // the input list is not the output list
  EXPECT_EQ(out.at("t").to_tensor().storage(), t.storage());
}

// ---- rules beyond the golden batches (expected values from torch 1.13, noted per case)

Tensor collate_tensor(Batch batch) {
  Value v = default_collate(batch);
  return v.to_tensor();
}

TEST(DefaultCollate, NumberDTypeFollowsTheFirstElementThenTorchTensorInference) {
  // torch 1.13: default_collate([True, 2.5]) -> float32, ([True, 1]) -> int64,
  // ([2.5, True]) -> float64, ([True, False]) -> bool.
  EXPECT_EQ(collate_tensor({true, 2.5}).dtype(), DType::Float32);
  EXPECT_EQ(collate_tensor({true, 1}).dtype(), DType::Int64);
  EXPECT_EQ(collate_tensor({1, true}).to_int64_vector(), (std::vector<int64_t>{1, 1}));
  Tensor f = collate_tensor({2.5, true});
  EXPECT_EQ(f.dtype(), DType::Float64);
  EXPECT_EQ(f.to_double_vector(), (std::vector<double>{2.5, 1.0}));
  EXPECT_EQ(collate_tensor({false, true}).dtype(), DType::Bool);
}

TEST(DefaultCollate, StackPromotesTensorDTypesLikeTorchStack) {
  auto one = [](DType t) { return f32({1}).to(t); };
  // torch 1.13 torch.stack results.
  EXPECT_EQ(collate_tensor({one(DType::Bool), one(DType::UInt8)}).dtype(), DType::UInt8);
  EXPECT_EQ(collate_tensor({one(DType::Int8), one(DType::UInt8)}).dtype(), DType::Int16);
  EXPECT_EQ(collate_tensor({one(DType::Float16), one(DType::BFloat16)}).dtype(), DType::Float32);
  EXPECT_EQ(collate_tensor({one(DType::Float16), one(DType::Int64)}).dtype(), DType::Float16);
  EXPECT_EQ(collate_tensor({one(DType::Int32), one(DType::Float16)}).dtype(), DType::Float16);
  EXPECT_EQ(collate_tensor({one(DType::Int64), one(DType::Int32), one(DType::Float64)}).dtype(), DType::Float64);
  // complex64 with float64 needs complex128, which loader lacks: a clear error, no wrong dtype.
  Batch b{f32({1}).to(DType::Complex64), f32({2}).to(DType::Float64)};
  EXPECT_THROW(default_collate(b), TypeError);
}

TEST(DefaultCollate, MixedKindsFailWithPyTorchsWording) {
  auto message = [](Batch b) {
    try {
      default_collate(b);
    } catch (const Error& e) {
      return e.python_type() + ": " + e.what();
    }
    return std::string("no error");
  };
  // torch 1.13: torch.stack([tensor, 1]) / torch.tensor([1, 'a']) / ([1, None]) / ([2.5, 'a']).
  EXPECT_EQ(message({i64({1}), 1}), "TypeError: expected Tensor as element 1 in argument 0, but got int");
  EXPECT_EQ(message({1, "a"}).rfind("TypeError: new(): invalid data type 'str'", 0), 0u);
  EXPECT_EQ(message({1, Value()}).rfind("RuntimeError: Could not infer dtype of NoneType", 0), 0u);
  EXPECT_EQ(message({2.5, "a"}).rfind("TypeError: must be real number, not str", 0), 0u);
  EXPECT_EQ(message({Value::tuple({1, 2}), Value::tuple({3})}),
            "RuntimeError: each element in list of batch should be of equal size");
  EXPECT_EQ(message({Value::list({1}), 1}).rfind("TypeError: object of type 'int' has no len()", 0), 0u);
  EXPECT_EQ(message({Value::dict({{"a", 1}}), Value::dict({{"b", 1}})}).rfind("KeyError: 'a'", 0), 0u);
  EXPECT_EQ(message({}).rfind("IndexError:", 0), 0u);
  // Strings first: the batch is returned as a list, whatever follows (as PyTorch).
  Batch strings{"a", 1};
  EXPECT_EQ(default_collate(strings), Value::list({"a", 1}));
}

TEST(DefaultCollate, DictSamplesWithOtherKeyOrderCollateByKey) {
  Batch b{Value::dict({{"a", 1}, {"b", 2}}), Value::dict({{"b", 4}, {"a", 3}})};
  Value out = default_collate(b);
  EXPECT_EQ(out.at("a").to_tensor().to_int64_vector(), (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(out.at("b").to_tensor().to_int64_vector(), (std::vector<int64_t>{2, 4}));
}

class CountingAllocator : public TensorAllocator {
 public:
  std::shared_ptr<Storage> allocate(size_t nbytes) override {
    ++calls;
    return heap_allocator().allocate(nbytes);
  }
  int calls = 0;
};

TEST(DefaultCollate, AllocatesOncePerTensorFieldFromTheGivenAllocator) {
  // W1's sample: (float32[16], int64).  K = 2 batch tensors, whatever the batch size.
  const int64_t kBatch = 64;
  Tensor features = Tensor::arange(kBatch * 16, DType::Float32).view({kBatch, 16});
  Batch batch;
  for (int64_t i = 0; i < kBatch; ++i) batch.push_back(Value::tuple({features[i], i}));
  CountingAllocator alloc;
  Value out = default_collate(batch, &alloc);
  EXPECT_EQ(alloc.calls, 2);
  ASSERT_TRUE(out.is_list());
  EXPECT_TRUE(out[0].to_tensor().equal(features));
  EXPECT_EQ(out[1].to_tensor().to_int64_vector(), Tensor::arange(kBatch).to_int64_vector());

  // Without an explicit allocator, the thread's current one is used.
  CountingAllocator scoped;
  {
    AllocatorScope scope(scoped);
    default_collate(batch);
  }
  EXPECT_EQ(scoped.calls, 2);
}

TEST(CollateRegistry, FindsRegisteredFunctionsAndNamesTheKnownOnes) {
  register_collate_fn("collate_test_first_only", [](std::vector<Value>& s) { return s.front(); });
  std::vector<Value> samples{7, 8};
  EXPECT_EQ(find_collate_fn("collate_test_first_only")(samples).to_int(), 7);
  EXPECT_EQ(find_collate_fn("default_collate")(samples).to_tensor().to_int64_vector(),
            (std::vector<int64_t>{7, 8}));
  try {
    find_collate_fn("collate_test_missing");
    ADD_FAILURE() << "expected ValueError";
  } catch (const ValueError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("collate_test_missing"), std::string::npos) << msg;
    EXPECT_NE(msg.find("collate_test_first_only"), std::string::npos) << msg;
    EXPECT_NE(msg.find("default_collate"), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace loader
