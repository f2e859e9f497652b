// LOADER_REGISTER_WORKER_INIT_FN compiles with only worker_info.h included (it is the
// first include of this file on purpose), and the function is found by name.
#include "loader/worker_info.h"

#include <gtest/gtest.h>

namespace {

int last_worker_id = -1;
LOADER_REGISTER_WORKER_INIT_FN("registration_test_init", [](int worker_id) { last_worker_id = worker_id; });

TEST(RegistrationMacros, WorkerInitFnCompilesWithItsOwnHeaderAlone) {
  loader::find_worker_init_fn("registration_test_init")(3);
  EXPECT_EQ(last_worker_id, 3);
}

}  // namespace
