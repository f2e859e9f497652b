// Generator::torch_state / set_torch_state (torch.Generator.get_state()'s 5056 bytes, the
// Python package's mirror of a torch.Generator), same_state, and the large-block reuse of
// Storage::allocate.  That the bytes are torch's own is checked against torch itself by
// python/tests/test_dataloader.py (generator states after every sampler's epoch).
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "loader/error.h"
#include "loader/generator.h"
#include "loader/storage.h"

namespace loader {
namespace {

std::vector<uint32_t> draws(Generator& g, int n) {
  std::vector<uint32_t> out;
  for (int i = 0; i < n; ++i) out.push_back(g.random());
  return out;
}

TEST(GeneratorTorchState, RoundTripsAtEveryPositionOfTheBlock) {
  for (int before : {0, 1, 5, 623, 624, 625, 1300}) {
    Generator g(1234);
    draws(g, before);
    const std::string s = g.torch_state();
    ASSERT_EQ(s.size(), Generator::kTorchStateBytes);
    Generator h(7);
    h.set_torch_state(s);
    EXPECT_EQ(h.initial_seed(), 1234u);
    EXPECT_EQ(draws(h, 700), draws(g, 700)) << "after " << before << " draws";
  }
}

TEST(GeneratorTorchState, AFreshStateIsSeededLayout) {
  Generator g(42);
  const std::string s = g.torch_state();
  uint64_t seed = 0, next = 0;
  int32_t left = 0, seeded = 0;
  std::memcpy(&seed, s.data(), 8);
  std::memcpy(&left, s.data() + 8, 4);
  std::memcpy(&seeded, s.data() + 12, 4);
  std::memcpy(&next, s.data() + 16, 8);
  EXPECT_EQ(seed, 42u);
  // torch after manual_seed: left = 1, next = 0; after a whole block: left = 1, next = 624.
  // Both regenerate on the next draw (next is then reset), so either is the same stream;
  // ours writes the second.
  EXPECT_EQ(left, 1);
  EXPECT_EQ(seeded, 1);
  EXPECT_EQ(next, 624u);
}

TEST(GeneratorTorchState, KeepsTheBasesNormalCachesAndRefusesOtherBytes) {
  Generator g(3);
  std::string base(Generator::kTorchStateBytes, '\x5a');
  const std::string s = g.torch_state(base);
  EXPECT_EQ(s.substr(24 + 624 * 8), base.substr(24 + 624 * 8));  // normal_x ... untouched
  EXPECT_THROW(g.torch_state(std::string(10, '\0')), ValueError);
  Generator h;
  EXPECT_THROW(h.set_torch_state(std::string(5048, '\0')), ValueError);
  std::string bad = s;
  const int32_t left = 0;
  std::memcpy(&bad[8], &left, 4);
  EXPECT_THROW(h.set_torch_state(bad), ValueError);
  EXPECT_EQ(h.initial_seed(), Generator::kDefaultSeed);  // unchanged by a refused state
}

TEST(GeneratorTorchState, LentDrawsCountAsMadeAndSameStateSeesThemWithoutMakingThem) {
  Generator g(11), ref(11);
  Generator snapshot = g;
  EXPECT_TRUE(g.same_state(snapshot));
  uint64_t ticket = 0;
  Generator copy = g.lend(1000, &ticket);
  EXPECT_FALSE(g.same_state(snapshot));  // owes draws now
  Generator after_loan = g;
  EXPECT_TRUE(g.same_state(after_loan));
  ref.discard(1000);
  Generator h;
  h.set_torch_state(g.torch_state());
  EXPECT_EQ(draws(h, 50), draws(ref, 50));
  (void)copy;
}

TEST(StorageLargeBlocks, AFreedBlockIsReusedForTheNextBatch) {
  const size_t n = 9u << 20;  // W2's batch: 9.6 MB
  const void* first = nullptr;
  {
    auto s = Storage::allocate(n);
    first = s->data();
    std::memset(s->data(), 1, n);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(s->data()) % 64, 0u);
  }
  auto again = Storage::allocate(n - 4096);
  EXPECT_EQ(again->data(), first);
  EXPECT_EQ(again->nbytes(), n - 4096);
  auto other = Storage::allocate(n);  // the cached one is taken: a new block
  EXPECT_NE(other->data(), first);
}

}  // namespace
}  // namespace loader
