// WorkerSlabs without any actor: the parent's pool of one worker's shared-memory
// slabs (sizing from the first batch, headroom, free list, dropping too-small
// slabs, the shared-memory budget).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "loader/runtime/os/shm.h"
#include "loader/runtime/parent/worker_slabs.h"

namespace loader::runtime {
namespace {

constexpr uint64_t kGranule = 64 * 1024;

SlabPolicy policy(int workers, int slabs_per_worker, uint64_t limit = 0) {
  SlabPolicy p;
  p.num_workers = workers;
  p.slabs_per_worker = slabs_per_worker;
  p.shm_limit_bytes = limit;
  return p;
}

bool contains(const std::vector<uint64_t>& v, uint64_t x) { return std::find(v.begin(), v.end(), x) != v.end(); }

TEST(WorkerSlabs, StartsWithoutASizeSoTheFirstTaskRunsWithoutASlab) {
  auto dir = std::make_shared<SlabDirectory>();
  WorkerSlabs slabs(0, policy(2, 4), dir);
  auto first = slabs.acquire();
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(*first, 0u) << "0 means: no slab yet, report the bytes needed";
  EXPECT_EQ(slabs.slab_size(), 0u);
  EXPECT_EQ(slabs.count(), 0u);
  EXPECT_TRUE(slabs.take_new().empty());
}

TEST(WorkerSlabs, AcquireAtLeastSizesSlabsWithHeadroomInWholeGranules) {
  auto dir = std::make_shared<SlabDirectory>();
  WorkerSlabs slabs(0, policy(1, 4), dir);
  const uint64_t need = 100000;
  uint64_t id = slabs.acquire_at_least(need);
  EXPECT_NE(id, 0u);
  // need * 1.25 = 125000, rounded up to 64 KiB granules: 131072.
  EXPECT_EQ(slabs.slab_size(), 2 * kGranule);
  auto seg = slabs.segment(id);
  ASSERT_NE(seg, nullptr);
  EXPECT_EQ(seg->size(), 2 * kGranule);
  EXPECT_GE(seg->size(), static_cast<size_t>(need * 5 / 4));
  std::memset(seg->data(), 0xab, seg->size());  // mapped read-write
  EXPECT_EQ(dir->find(id), seg) << "the iterator finds the slab through the directory";
  EXPECT_EQ(slabs.take_new(), (std::vector<uint64_t>{id}));
  EXPECT_TRUE(slabs.take_new().empty()) << "take_new hands each new slab out once";
}

TEST(WorkerSlabs, AcquireCreatesSlabsOfTheKnownSizeAndReusesReleasedOnes) {
  auto dir = std::make_shared<SlabDirectory>();
  WorkerSlabs slabs(0, policy(1, 4), dir);
  uint64_t a = slabs.acquire_at_least(1000);
  EXPECT_EQ(slabs.slab_size(), kGranule);
  auto b = slabs.acquire();
  ASSERT_TRUE(b.has_value());
  EXPECT_NE(*b, 0u);
  EXPECT_NE(*b, a);
  EXPECT_EQ(slabs.segment(*b)->size(), kGranule);
  EXPECT_EQ(slabs.count(), 2u);
  EXPECT_EQ(slabs.free_count(), 0u);

  EXPECT_FALSE(slabs.release(a)) << "a slab of the current size is kept";
  EXPECT_EQ(slabs.free_count(), 1u);
  auto again = slabs.acquire();
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(*again, a) << "a released slab is reused before a new one is made";
  EXPECT_EQ(slabs.count(), 2u);
  EXPECT_EQ(slabs.bytes(), 2 * kGranule);
}

TEST(WorkerSlabs, AcquireAtLeastPrefersAFreeSlabThatIsLargeEnough) {
  auto dir = std::make_shared<SlabDirectory>();
  WorkerSlabs slabs(0, policy(1, 4), dir);
  uint64_t a = slabs.acquire_at_least(1000);
  slabs.release(a);
  EXPECT_EQ(slabs.acquire_at_least(2000), a);
  EXPECT_EQ(slabs.count(), 1u);
}

TEST(WorkerSlabs, GrowingDropsFreeSlabsThatAreTooSmall) {
  auto dir = std::make_shared<SlabDirectory>();
  WorkerSlabs slabs(0, policy(1, 4), dir);
  uint64_t small = slabs.acquire_at_least(1000);
  slabs.release(small);
  (void)slabs.take_new();
  uint64_t big = slabs.acquire_at_least(200000);  // 250000 -> 262144
  EXPECT_EQ(slabs.slab_size(), 4 * kGranule);
  EXPECT_NE(big, small);
  EXPECT_EQ(slabs.segment(small), nullptr);
  EXPECT_EQ(dir->find(small), nullptr);
  EXPECT_EQ(slabs.take_dropped(), (std::vector<uint64_t>{small})) << "the worker must forget it";
  EXPECT_EQ(slabs.take_new(), (std::vector<uint64_t>{big}));
}

TEST(WorkerSlabs, ABusySlabThatIsTooSmallIsDroppedWhenReleased) {
  auto dir = std::make_shared<SlabDirectory>();
  WorkerSlabs slabs(0, policy(1, 4), dir);
  uint64_t small = slabs.acquire_at_least(1000);  // busy with a task
  uint64_t big = slabs.acquire_at_least(200000);
  EXPECT_TRUE(slabs.take_dropped().empty()) << "a busy slab is not dropped under its task";
  EXPECT_NE(dir->find(small), nullptr);
  EXPECT_TRUE(slabs.release(small)) << "release reports that the slab was destroyed";
  EXPECT_EQ(dir->find(small), nullptr);
  EXPECT_TRUE(contains(slabs.take_dropped(), small));
  EXPECT_FALSE(slabs.release(big));
  EXPECT_EQ(slabs.free_count(), 1u);
  EXPECT_FALSE(slabs.release(12345678)) << "an unknown id is ignored";
}

TEST(WorkerSlabs, WaitsWhenEverySlabIsBusyAndTheLimitIsSpent) {
  auto dir = std::make_shared<SlabDirectory>();
  WorkerSlabs slabs(0, policy(1, 2, 2 * kGranule), dir);
  uint64_t a = slabs.acquire_at_least(1000);
  auto b = slabs.acquire();
  ASSERT_TRUE(b.has_value());
  ASSERT_NE(*b, 0u);
  EXPECT_FALSE(slabs.acquire().has_value()) << "a third slab would exceed shm_limit_bytes: the task waits";
  slabs.release(a);
  auto c = slabs.acquire();
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(*c, a);
}

TEST(WorkerSlabs, TooSmallShmLimitIsAnErrorNamingBytesNeededAndTheLimit) {
  auto dir = std::make_shared<SlabDirectory>();
  const uint64_t limit = 1 << 20;
  WorkerSlabs slabs(0, policy(2, 4, limit), dir);
  // 1 MiB * 1.25 = 1310720 (already whole granules); pool = 2 workers x 4 slabs.
  const uint64_t pool = 2 * 4 * 1310720ULL;
  try {
    slabs.acquire_at_least(1 << 20);
    FAIL() << "expected ShmError";
  } catch (const ShmError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find(std::to_string(pool) + " bytes"), std::string::npos) << m;
    EXPECT_NE(m.find(std::to_string(limit) + " bytes"), std::string::npos) << m;
    EXPECT_NE(m.find("shm_limit_bytes"), std::string::npos) << m;
    EXPECT_STREQ(e.python_type().c_str(), "RuntimeError");
  }
  EXPECT_EQ(slabs.count(), 0u) << "nothing is allocated when the budget check fails";
  EXPECT_EQ(slabs.slab_size(), 0u);
}

TEST(WorkerSlabs, PoolLargerThanFreeSharedMemoryIsAnErrorNamingNeededAndFree) {
  auto dir = std::make_shared<SlabDirectory>();
  WorkerSlabs slabs(0, policy(1, 4), dir);
  const uint64_t free = shm_free_bytes();
  ASSERT_GT(free, 0u) << shm_dir() << " is not readable";
  try {
    slabs.acquire_at_least(free);
    FAIL() << "expected ShmError for a pool of 4 x " << free << " bytes";
  } catch (const ShmError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("needs"), std::string::npos) << m;
    EXPECT_NE(m.find(shm_dir()), std::string::npos) << m;
    EXPECT_NE(m.find("free"), std::string::npos) << m;
    EXPECT_NE(m.find(" bytes ("), std::string::npos) << "numbers in bytes and MiB: " << m;
  }
  EXPECT_EQ(slabs.count(), 0u);
}

TEST(WorkerSlabs, DestroyingThePoolRemovesItsSlabsFromTheDirectory) {
  auto dir = std::make_shared<SlabDirectory>();
  uint64_t a = 0, b = 0;
  std::shared_ptr<ShmSegment> kept;
  {
    WorkerSlabs slabs(0, policy(1, 4), dir);
    a = slabs.acquire_at_least(1000);
    b = *slabs.acquire();
    kept = slabs.segment(a);
  }
  EXPECT_EQ(dir->find(a), nullptr);
  EXPECT_EQ(dir->find(b), nullptr);
  ASSERT_NE(kept, nullptr);
  std::memset(kept->data(), 1, kept->size());  // a batch still holding it keeps it mapped
}

TEST(WorkerSlabs, SlabIdsAreUniqueAcrossWorkersAndNeverZero) {
  auto dir = std::make_shared<SlabDirectory>();
  WorkerSlabs w0(0, policy(2, 4), dir);
  WorkerSlabs w1(1, policy(2, 4), dir);
  std::vector<uint64_t> ids = {w0.acquire_at_least(10), w1.acquire_at_least(10), *w0.acquire(), *w1.acquire()};
  std::sort(ids.begin(), ids.end());
  EXPECT_EQ(std::adjacent_find(ids.begin(), ids.end()), ids.end());
  EXPECT_NE(ids.front(), 0u);
}

TEST(SlabDirectory, RemembersWhichSlabsArePinned) {
  SlabDirectory dir;
  auto seg = ShmSegment::create(4096);
  dir.add(5, seg);
  EXPECT_FALSE(dir.pinned(5));
  dir.set_pinned(5, true);
  EXPECT_TRUE(dir.pinned(5));
  dir.set_pinned(6, true);  // unknown: ignored
  EXPECT_FALSE(dir.pinned(6));
  dir.remove(5);
  EXPECT_EQ(dir.find(5), nullptr);
  EXPECT_FALSE(dir.pinned(5));
}

}  // namespace
}  // namespace loader::runtime
