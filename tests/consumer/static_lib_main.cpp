// EXPECT_REGISTERED=1 (static_whole, linked with WHOLE_ARCHIVE): "consumer_sevens"
// from the static library loads with 2 worker processes.  EXPECT_REGISTERED=0
// (static_dropped, a plain link): the name is unknown and the error explains static
// libraries and whole-archive linking.  Exits 0 when the expectation holds.
#include <cstdio>
#include <exception>
#include <string>

#include "loader/dataloader.h"
#include "loader/error.h"
#include "loader/worker_main.h"

int main(int argc, char** argv) {
  if (auto rc = loader::runtime::run_worker_if_requested(argc, argv)) return *rc;
  const char* me = EXPECT_REGISTERED ? "static_whole" : "static_dropped";
  try {
    auto ds = loader::make_dataset({"consumer_sevens", loader::Value()});
    if (!EXPECT_REGISTERED) {
      std::fprintf(stderr, "%s: consumer_sevens is registered although its library was not linked whole\n", me);
      return 1;
    }
    loader::DataLoaderOptions o;
    o.batch_size = 10;
    o.num_workers = 2;
    loader::DataLoader dl(ds, o);
    int64_t sum = 0;
    for (loader::Value& batch : dl)
      for (int64_t v : batch.to_tensor().to_int64_vector()) sum += v;
    if (sum != 7 * (69 * 70 / 2)) {
      std::fprintf(stderr, "%s: wrong sum %lld\n", me, static_cast<long long>(sum));
      return 1;
    }
  } catch (const loader::ValueError& e) {
    const std::string m = e.what();
    if (EXPECT_REGISTERED) {
      std::fprintf(stderr, "%s: %s\n", me, e.what());
      return 1;
    }
    for (const char* part : {"unknown map-style dataset type 'consumer_sevens'", "static library",
                             "$<LINK_LIBRARY:WHOLE_ARCHIVE,", "-Wl,--whole-archive"})
      if (m.find(part) == std::string::npos) {
        std::fprintf(stderr, "%s: the error does not say \"%s\": %s\n", me, part, e.what());
        return 1;
      }
    std::printf("%s: ok (the error explains it: %s)\n", me, e.what());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", me, e.what());
    return 1;
  }
  std::printf("%s: ok\n", me);
  return 0;
}
