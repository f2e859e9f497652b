// LOADER_REGISTER_DATASET compiles with only dataset.h included (it is the first
// include of this file on purpose); built-in types are there without any call; an
// unknown name says how to keep registrations that live in a static library.
#include "loader/dataset.h"

#include <gtest/gtest.h>

#include <string>

#include "loader/error.h"

namespace {

class Ones : public loader::Dataset {
 public:
  loader::Value get(int64_t) override { return loader::Value(int64_t{1}); }
  int64_t size() const override { return 3; }
};
LOADER_REGISTER_DATASET("registration_test_ones", [](const loader::Value&) { return std::make_shared<Ones>(); });

TEST(RegistrationMacros, DatasetCompilesWithItsOwnHeaderAlone) {
  auto ds = loader::make_dataset({"registration_test_ones", loader::Value()});
  EXPECT_EQ(ds->size(), 3);
}

TEST(Registry, BuiltInTypesNeedNoRegistrationCall) {
  // Nothing in this program calls register_builtin_datasets(), register_pt_datasets()
  // or register_fashion_mnist(): the registry adds them on first use.
  for (const char* name : {"range", "subset", "concat", "pt_tensor_dataset", "fashion_mnist"})
    EXPECT_TRUE(loader::is_registered_dataset(name)) << name;
  for (const char* name : {"range_iterable", "counting", "chain"})
    EXPECT_TRUE(loader::is_registered_iterable_dataset(name)) << name;
  auto r = loader::make_dataset({"range", loader::Value::dict({{"n", 5}})});
  EXPECT_EQ(r->size(), 5);
}

TEST(Registry, UnknownTypeExplainsStaticLibraries) {
  try {
    loader::make_dataset({"registration_test_nowhere", loader::Value()});
    FAIL() << "no error";
  } catch (const loader::ValueError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("unknown map-style dataset type 'registration_test_nowhere'"), std::string::npos) << m;
    EXPECT_NE(m.find("registration_test_ones"), std::string::npos) << "lists the registered types: " << m;
    EXPECT_NE(m.find("LOADER_REGISTER_DATASET"), std::string::npos) << m;
    EXPECT_NE(m.find("static library"), std::string::npos) << m;
    EXPECT_NE(m.find("$<LINK_LIBRARY:WHOLE_ARCHIVE,"), std::string::npos) << m;
    EXPECT_NE(m.find("-Wl,--whole-archive"), std::string::npos) << m;
  }
}

}  // namespace
