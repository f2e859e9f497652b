// The batch codec without any actor: a batch placed in a shared-memory slab,
// encoded as descriptors and decoded again gives the same values, viewing the slab.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "loader/error.h"
#include "loader/runtime/batch_codec.h"
#include "loader/runtime/os/shm.h"

namespace loader::runtime {
namespace {

bool inside(const Tensor& t, const ShmSegment& seg) {
  auto* p = static_cast<const uint8_t*>(t.storage()->data());
  auto* b = static_cast<const uint8_t*>(seg.data());
  return p >= b && p + t.storage()->nbytes() <= b + seg.size();
}

/// A batch with tensors of several dtypes, a non-contiguous view, a 0-dim tensor,
/// an empty tensor, and non-tensor leaves.
Value sample_batch() {
  auto f = Tensor::from_vector<float>({1.5f, -2.f, 3.25f, 4.f, 5.f, 6.f}, {2, 3});
  auto i64 = Tensor::from_vector<int64_t>({INT64_MIN, -1, 0, INT64_MAX});
  auto u8 = Tensor::from_vector<uint8_t>({0, 7, 255});
  auto d = Tensor::from_vector<double>({0.1, 0.2, 0.3, 0.4}, {2, 2}).transpose(0, 1);  // not contiguous
  auto scalar = Tensor::scalar(int64_t{42});
  auto empty = Tensor::zeros({0, 3}, DType::Float32);
  auto b = Tensor::from_vector<bool>({true, false, true});
  return Value::dict({{"features", f},
                      {"labels", Value::list({i64, u8})},
                      {"transposed", d},
                      {"scalar", scalar},
                      {"empty", empty},
                      {"flags", b},
                      {"meta", Value::tuple({Value(int64_t{3}), Value("name"), Value(2.5)})}});
}

TEST(BatchCodec, PlaceEncodeDecodeGivesEqualTensorsViewingTheSlab) {
  auto seg = ShmSegment::create(1 << 16);
  const Value original = sample_batch();
  SlabAllocator alloc(21, seg->data(), seg->size());
  Value placed = place_in_slab(original, alloc);
  ASSERT_FALSE(alloc.overflowed());
  EXPECT_GT(alloc.required(), 0u);
  EXPECT_EQ(alloc.required() % 64, 0u) << "64-byte aligned";
  placed.for_each_tensor([&](const Tensor& t) {
    EXPECT_TRUE(alloc.owns(*t.storage()));
    EXPECT_TRUE(inside(t, *seg));
  });
  std::string payload = encode_batch(placed, 21);

  bool released = false;
  {
    auto lease = std::make_shared<BatchLease>(seg, [&] { released = true; }, false);
    Value decoded = decode_batch(payload, 21, lease);
    lease.reset();
    EXPECT_EQ(decoded, original);
    EXPECT_EQ(decoded.at("features").to_tensor().dtype(), DType::Float32);
    EXPECT_EQ(decoded.at("features").to_tensor().sizes(), (Dims{2, 3}));
    EXPECT_EQ(decoded.at("labels")[0].to_tensor().to_int64_vector(),
              original.at("labels")[0].to_tensor().to_int64_vector());
    EXPECT_EQ(decoded.at("transposed").to_tensor().sizes(), (Dims{2, 2}));
    EXPECT_EQ(decoded.at("scalar").to_tensor().dim(), 0);
    EXPECT_EQ(decoded.at("scalar").to_tensor().item<int64_t>(), 42);
    EXPECT_EQ(decoded.at("empty").to_tensor().sizes(), (Dims{0, 3}));
    EXPECT_EQ(decoded.at("meta")[1].to_string(), "name");
    decoded.for_each_tensor([&](const Tensor& t) {
      EXPECT_EQ(t.storage()->kind(), MemoryKind::SharedMemory);
      EXPECT_TRUE(inside(t, *seg)) << "zero-copy: a view of the slab";
    });
    EXPECT_FALSE(released) << "the slab stays leased while a tensor of the batch lives";
    // Writes through the slab are seen by the decoded view: no copy was made.
    Tensor f = decoded.at("features").to_tensor();
    *static_cast<float*>(f.data_ptr()) = 99.f;
    EXPECT_EQ(placed.at("features").to_tensor().at<float>({0, 0}), 99.f);
  }
  EXPECT_TRUE(released) << "dropping the batch returns the slab";
}

TEST(BatchCodec, TensorsCollatedInThePlaceStayWhereTheyAre) {
  auto seg = ShmSegment::create(1 << 16);
  SlabAllocator alloc(3, seg->data(), seg->size());
  Tensor in_slab = Tensor::empty({4}, DType::Int32, &alloc);
  EXPECT_TRUE(inside(in_slab, *seg));
  size_t used = alloc.required();
  Value placed = place_in_slab(Value::list({in_slab}), alloc);
  EXPECT_EQ(placed[0].to_tensor().data_ptr(), in_slab.data_ptr()) << "no second copy";
  EXPECT_EQ(alloc.required(), used);
}

TEST(BatchCodec, BatchLargerThanTheSlabOverflowsAndReportsTheBytesItNeeds) {
  auto seg = ShmSegment::create(256);
  SlabAllocator alloc(4, seg->data(), seg->size());
  Value batch = Value::list({Tensor::zeros({100}, DType::Float32), Tensor::zeros({10}, DType::Int64)});
  (void)place_in_slab(batch, alloc);
  EXPECT_TRUE(alloc.overflowed());
  EXPECT_EQ(alloc.required(), 448u + 128u) << "400 -> 448 and 80 -> 128 bytes, 64-byte aligned";

  SlabAllocator measure(0, nullptr, 0);
  (void)place_in_slab(batch, measure);
  EXPECT_TRUE(measure.overflowed());
  EXPECT_EQ(measure.required(), alloc.required());
}

TEST(BatchCodec, EncodingATensorOutsideTheSlabIsAnError) {
  Value batch = Value::list({Tensor::zeros({3}, DType::Float32)});
  EXPECT_THROW(encode_batch(batch, 5), RuntimeError) << "place_in_slab was not called";
}

TEST(BatchCodec, DescriptorsOutsideTheSlabAreRejected) {
  // Encoded against a 1 MiB slab, decoded against a 64 KiB one with the same id.
  auto big = ShmSegment::create(1 << 20);
  SlabAllocator alloc(8, big->data(), big->size());
  (void)Tensor::empty({200000}, DType::UInt8, &alloc);  // pushes the next tensor past 64 KiB
  Value placed = place_in_slab(Value::list({Tensor::zeros({16}, DType::Float64)}), alloc);
  ASSERT_FALSE(alloc.overflowed());
  std::string payload = encode_batch(placed, 8);

  auto small = ShmSegment::create(1 << 16);
  auto lease = std::make_shared<BatchLease>(small, nullptr, false);
  try {
    decode_batch(payload, 8, lease);
    FAIL() << "a descriptor past the end of the slab must be rejected";
  } catch (const ValueError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("outside slab 8"), std::string::npos) << m;
    EXPECT_NE(m.find(std::to_string(small->size())), std::string::npos) << m;
  }
}

TEST(BatchCodec, TruncatedPayloadIsAnErrorNotACrash) {
  auto seg = ShmSegment::create(1 << 16);
  SlabAllocator alloc(2, seg->data(), seg->size());
  Value placed = place_in_slab(Value::list({Tensor::zeros({4, 4}, DType::Float32)}), alloc);
  std::string payload = encode_batch(placed, 2);
  auto lease = std::make_shared<BatchLease>(seg, nullptr, false);
  int rejected = 0;
  for (size_t cut = 0; cut < payload.size(); ++cut) {
    try {
      (void)decode_batch(payload.substr(0, cut), 2, lease);
    } catch (const Error&) {
      ++rejected;
    }
  }
  EXPECT_EQ(rejected, static_cast<int>(payload.size())) << "every strict prefix must be rejected";
}

TEST(BatchCodec, PinnedLeaseMarksDecodedStoragesPinned) {
  auto seg = ShmSegment::create(1 << 16);
  SlabAllocator alloc(6, seg->data(), seg->size());
  Value placed = place_in_slab(Value::list({Tensor::zeros({4}, DType::Float32)}), alloc);
  std::string payload = encode_batch(placed, 6);
  auto pinned = std::make_shared<BatchLease>(seg, nullptr, true);
  auto plain = std::make_shared<BatchLease>(seg, nullptr, false);
  EXPECT_TRUE(decode_batch(payload, 6, pinned)[0].to_tensor().is_pinned());
  EXPECT_FALSE(decode_batch(payload, 6, plain)[0].to_tensor().is_pinned());
}

// Over a byte stream: the skeleton, then the tensors' bytes read into tensors that
// were allocated but not filled, give the batch back; the host's contiguous tensors
// that only the batch holds are sent from where they are, the others copied first.
TEST(BatchCodec, ASplitBatchFilledFromItsBytesIsTheBatch) {
  const Value batch = sample_batch();
  SplitBatch split = split_batch(batch);
  ASSERT_EQ(split.tensors.size(), 7u);  // features, 2 labels, transposed, scalar, empty, flags
  uint64_t sum = 0;
  for (const Tensor& t : split.tensors) {
    EXPECT_TRUE(t.is_contiguous());
    sum += t.nbytes();
  }
  EXPECT_EQ(split.data_bytes, sum);
  std::string data;
  for (const Tensor& t : split.tensors) data.append(static_cast<const char*>(t.data_ptr()), t.nbytes());

  UnfilledBatch un = unfilled_batch(split.skeleton, data.size());
  ASSERT_EQ(un.tensors.size(), split.tensors.size());
  size_t at = 0;
  for (const Tensor& t : un.tensors) {
    if (t.nbytes()) std::memcpy(t.data_ptr(), data.data() + at, t.nbytes());
    at += t.nbytes();
  }
  EXPECT_EQ(un.batch, batch);
  EXPECT_TRUE(un.batch.at("transposed").to_tensor().is_contiguous());

  // Sent from where they are: a tensor only the batch holds; copied: one the dataset holds too.
  auto owned = Tensor::from_vector<float>({1, 2, 3});
  const void* where = owned.data_ptr();
  Value just_owned = Value::list({std::move(owned)});
  EXPECT_EQ(split_batch(just_owned).tensors.at(0).data_ptr(), where);
  auto kept = Tensor::from_vector<float>({1, 2, 3});
  SplitBatch copied = split_batch(Value::list({kept}));
  EXPECT_NE(copied.tensors.at(0).data_ptr(), kept.data_ptr());
  EXPECT_TRUE(copied.tensors.at(0).equal(kept));
}

TEST(BatchCodec, ASkeletonThatClaimsMoreOrFewerBytesThanFollowIsRefusedBeforeAllocating) {
  const SplitBatch split = split_batch(sample_batch());
  EXPECT_NO_THROW(unfilled_batch(split.skeleton, split.data_bytes));
  for (uint64_t wrong : {uint64_t{0}, split.data_bytes - 1, split.data_bytes + 1}) {
    try {
      unfilled_batch(split.skeleton, wrong);
      ADD_FAILURE() << "a skeleton of " << split.data_bytes << " bytes of tensors was read against " << wrong;
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find("bytes of data that follow"), std::string::npos) << e.what();
    }
  }
  // A tensor of 2^40 floats against 100 bytes: refused, not allocated.
  SplitBatch one = split_batch(Value::list({Tensor::zeros({4}, DType::Float32)}));
  std::string lying = one.skeleton;
  const size_t size_at = lying.size() - 8;  // the tensor's only size, the skeleton's last field
  const uint64_t big = uint64_t{1} << 40;
  std::memcpy(&lying[size_at], &big, 8);
  EXPECT_THROW(unfilled_batch(lying, 100), ValueError);
  // Every cut of a skeleton is an error, never a read past its end.
  for (size_t n = 0; n < split.skeleton.size(); ++n)
    EXPECT_THROW(unfilled_batch(split.skeleton.substr(0, n), split.data_bytes), ValueError) << n;
}

}  // namespace
}  // namespace loader::runtime
