// A dataset registered in a static library (libconsumer_datasets.a).  Nothing else
// in this file is referenced by static_lib_main.cpp, so a plain link drops it.
#include "loader/dataset.h"

namespace {
class Sevens : public loader::Dataset {
 public:
  loader::Value get(int64_t i) override { return loader::Value(7 * i); }
  int64_t size() const override { return 70; }
};
}  // namespace

LOADER_REGISTER_DATASET("consumer_sevens", [](const loader::Value&) { return std::make_shared<Sevens>(); });
