// LOADER_REGISTER_COLLATE_FN compiles with only collate.h included (it is the first
// include of this file on purpose), and the function is found by name.
#include "loader/collate.h"

#include <gtest/gtest.h>

namespace {

LOADER_REGISTER_COLLATE_FN("registration_test_count", [](std::vector<loader::Value>& samples) {
  return loader::Value(static_cast<int64_t>(samples.size()));
});
LOADER_REGISTER_COLLATE_FN("registration_test_first", [](std::vector<loader::Value>& samples) {
  return samples.front();
});  // two on neighbouring lines: the registrar names stay unique

TEST(RegistrationMacros, CollateFnCompilesWithItsOwnHeaderAlone) {
  std::vector<loader::Value> samples = {loader::Value(int64_t{4}), loader::Value(int64_t{5})};
  EXPECT_EQ(loader::find_collate_fn("registration_test_count")(samples).to_int(), 2);
  EXPECT_EQ(loader::find_collate_fn("registration_test_first")(samples).to_int(), 4);
}

}  // namespace
