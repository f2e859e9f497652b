// Truncated, corrupt and hostile `.pt` files give PtFormatError, never a crash, a
// hang or a huge allocation.
#include <gtest/gtest.h>

#include <random>

#include "loader/serialization/pickle.h"
#include "loader/serialization/pt.h"
#include "loader/serialization/zip.h"
#include "pt_test_util.h"

namespace {

using loader::Value;
namespace pt = loader::pt;
using namespace loader::testing;
using namespace std::string_literals;

const char* const kGolden[] = {"t_float32.pt", "t_bool.pt", "t_complex64.pt", "t_scalar_0dim.pt", "t_empty_2x0.pt",
                               "view_offset.pt", "view_expand_stride0.pt", "views_sharing_storage.pt",
                               "dict_of_tensors.pt", "list_mixed.pt", "nested.pt", "state_dict.pt", "parameter.pt",
                               "requires_grad_tensor.pt"};

// An archive "archive/..." holding `pickle` as data.pkl and the given storage records.
std::string archive_with(const std::string& pickle, const std::vector<std::pair<std::string, std::string>>& storages = {}) {
  std::string out;
  pt::ZipWriter w([&](const void* p, size_t n) { out.append(static_cast<const char*>(p), n); });
  w.write_record("archive/data.pkl", pickle.data(), pickle.size());
  for (const auto& [key, bytes] : storages) w.write_record("archive/data/" + key, bytes.data(), bytes.size());
  w.write_record("archive/version", "3\n", 2);
  w.finish();
  return out;
}

std::string load_error(const std::string& bytes) {
  try {
    pt::load_bytes(bytes);
  } catch (const pt::PtFormatError& e) {
    return e.what();
  }
  return "";
}

// _rebuild_tensor_v2 of a FloatStorage with the given numbers, via our own pickler.
std::string tensor_pickle(int64_t numel, int64_t offset, std::vector<int64_t> sizes, std::vector<int64_t> strides,
                          const std::string& storage_class = "FloatStorage") {
  pt::Pickler p;
  p.proto();
  p.global("torch._utils", "_rebuild_tensor_v2");
  p.mark();
  p.mark();
  p.string("storage");
  p.global("torch", storage_class);
  p.string("0", 1);
  p.string("cpu");
  p.integer(numel);
  p.tuple_end(5);
  p.op(pt::op::BINPERSID);
  p.integer(offset);
  for (auto* v : {&sizes, &strides}) {
    if (v->empty()) {
      p.empty_tuple();
      continue;
    }
    if (v->size() > 3) p.mark();
    for (int64_t x : *v) p.integer(x);
    p.tuple_end(v->size());
  }
  p.boolean(false);
  p.global("collections", "OrderedDict");
  p.empty_tuple();
  p.op(pt::op::REDUCE);
  p.tuple_end(6);
  p.op(pt::op::REDUCE);
  p.stop();
  return p.take();
}

TEST(PtHostile, CraftedTensorPickleLoads) {  // the baseline the other cases break
  Value v = pt::load_bytes(archive_with(tensor_pickle(4, 1, {3}, {1}), {{"0", std::string(16, '\0')}}));
  EXPECT_EQ(v.to_tensor().numel(), 3);
  EXPECT_EQ(v.to_tensor().storage_offset(), 1);
}

TEST(PtHostile, TruncationAtEveryThirdByteIsAFormatError) {
  int cases = 0;
  for (const char* name : kGolden) {
    const std::string full = read_file(golden_pt(name));
    for (size_t cut = 0; cut < full.size(); cut += 3) {
      ++cases;
      try {
        pt::load_bytes(full.data(), cut);
        ADD_FAILURE() << name << " truncated to " << cut << " bytes loaded";
      } catch (const pt::PtFormatError&) {
      } catch (const std::exception& e) {
        ADD_FAILURE() << name << " cut at " << cut << ": not a PtFormatError: " << e.what();
      }
    }
  }
  EXPECT_GT(cases, 2000);
}

TEST(PtHostile, EveryFlippedByteLoadsOrFailsCleanly) {
  int failed = 0, loaded = 0;
  for (const char* name : kGolden) {
    const std::string full = read_file(golden_pt(name));
    for (size_t i = 0; i < full.size(); ++i) {
      std::string bad = full;
      bad[i] = static_cast<char>(bad[i] ^ 0xFF);
      try {
        pt::load_bytes(bad);
        ++loaded;  // padding bytes and unused header fields are not checked
      } catch (const loader::Error&) {
        ++failed;
      } catch (const std::exception& e) {
        ADD_FAILURE() << name << " byte " << i << ": " << e.what();
      }
    }
  }
  EXPECT_GT(failed, loaded);  // records are CRC-checked: most flips are caught
}

// Mutated pickles inside well-formed archives (CRC recomputed): the unpickler itself
// sees corrupt input.
TEST(PtHostile, RandomlyMutatedPicklesFailCleanly) {
  std::mt19937 rng(12345);
  int errors = 0, iterations = 0;
  for (const char* name : kGolden) {
    pt::ZipReader z(pt::ByteSource::from_file(golden_pt(name)));
    std::string pkl, prefix;
    std::vector<std::pair<std::string, std::string>> storages;
    for (const auto& e : z.entries()) {
      const std::string base = e.name.substr(e.name.find('/') + 1);
      if (base == "data.pkl") pkl = z.read(e);
      else if (base.rfind("data/", 0) == 0) storages.emplace_back(base.substr(5), z.read(e));
    }
    for (int it = 0; it < 400; ++it, ++iterations) {
      std::string m = pkl;
      const int edits = 1 + static_cast<int>(rng() % 4);
      for (int k = 0; k < edits; ++k) {
        const size_t pos = rng() % m.size();
        switch (rng() % 3) {
          case 0: m[pos] = static_cast<char>(rng()); break;
          case 1: m.erase(pos, 1 + rng() % 8); break;
          default: m.insert(pos, 1, static_cast<char>(rng())); break;
        }
        if (m.empty()) m = ".";
      }
      try {
        pt::load_bytes(archive_with(m, storages));
      } catch (const pt::PtFormatError&) {
        ++errors;
      } catch (const std::exception& e) {
        ADD_FAILURE() << name << " iteration " << it << ": not a PtFormatError: " << e.what();
      }
    }
  }
  EXPECT_GT(errors, iterations / 2);
}

TEST(PtHostile, ForbiddenGlobalsAreRefusedByName) {
  struct Case {
    std::string pickle;
    std::string name;
  };
  const std::vector<Case> cases = {
      {"\x80\x02" "cos\nsystem\nX\x02\x00\x00\x00ls\x85R."s, "os.system"},
      {"\x80\x02" "cposix\nsystem\nX\x02\x00\x00\x00ls\x85R."s, "posix.system"},
      {"\x80\x02" "c__builtin__\neval\nX\x01\x00\x00\x00" "1\x85R."s, "builtins.eval"},
      {"\x80\x02" "ctorch\nload\n."s, "torch.load"},
      {"\x80\x04\x8c\x02os\x8c\x06system\x93."s, "os.system"},  // STACK_GLOBAL
      {"\x80\x02" "csubprocess\nPopen\n."s, "subprocess.Popen"},
  };
  for (const auto& c : cases) {
    const std::string m = load_error(archive_with(c.pickle));
    EXPECT_NE(m.find("Unsupported global: GLOBAL " + c.name), std::string::npos) << m;
    EXPECT_NE(m.find("archive/data.pkl"), std::string::npos) << m;
    EXPECT_NE(m.find("offset"), std::string::npos) << m;
  }
  // a known dtype loader lacks says so
  EXPECT_NE(load_error(archive_with("\x80\x02" "ctorch\nComplexDoubleStorage\n.")).find("no such dtype"), std::string::npos);
}

TEST(PtHostile, OpcodesThatBuildArbitraryObjectsAreRefused) {
  for (const std::string& p : {"\x80\x02(cos\nsystem\nX\x02\x00\x00\x00lsi\n"s,
                               "\x80\x02(X\x01\x00\x00\x00" "ao."s, "\x80\x02\x82\x01."s,
                               std::string("\x80\x02S'abc'\n.")}) {
    EXPECT_FALSE(load_error(archive_with(p)).empty()) << p;
  }
  // REDUCE of something that is not an allowed function
  EXPECT_NE(load_error(archive_with("\x80\x02" "ctorch\nFloatStorage\n)R.")).find("unrecognized function"), std::string::npos);
  // BUILD on a plain list
  EXPECT_NE(load_error(archive_with("\x80\x02]}b.")).find("Can only build"), std::string::npos);
  // a class left in the result, or in an OrderedDict attribute
  EXPECT_NE(load_error(archive_with("\x80\x02]ctorch\nFloatStorage\na.")).find("not data"), std::string::npos);
  EXPECT_NE(load_error(archive_with("\x80\x02" "ccollections\nOrderedDict\n)R}X\x01\x00\x00\x00" "actorch\nFloatStorage\nsb."s)).find("not data"),
            std::string::npos);
}

TEST(PtHostile, OversizedSizesAreRefusedWithoutAllocating) {
  const std::string store(16, '\0');
  // sizes whose product overflows int64
  EXPECT_NE(load_error(archive_with(tensor_pickle(4, 0, {1LL << 62, 4}, {1, 1}), {{"0", store}})).find("2^63"), std::string::npos);
  // sizes x strides overflowing
  EXPECT_NE(load_error(archive_with(tensor_pickle(4, 0, {3, 2}, {1LL << 62, 1}), {{"0", store}})).find("2^63"), std::string::npos);
  // a storage numel that overflows numel * element size
  EXPECT_NE(load_error(archive_with(tensor_pickle(1LL << 62, 0, {1}, {1}), {{"0", store}})).find("overflows"), std::string::npos);
  // a storage numel larger than its record
  EXPECT_NE(load_error(archive_with(tensor_pickle(1000000, 0, {1}, {1}), {{"0", store}})).find("declares a storage"), std::string::npos);
  // length fields larger than the pickle
  EXPECT_NE(load_error(archive_with(std::string("\x80\x02X\xff\xff\xff\xff", 7))).find("truncated"), std::string::npos);
  EXPECT_NE(load_error(archive_with("\x80\x04\x8e\xff\xff\xff\xff\xff\xff\xff\x7f"s)).find("truncated"), std::string::npos);
  EXPECT_NE(load_error(archive_with(std::string("\x80\x02\x8b\xff\xff\xff\x7f", 7))).find("truncated"), std::string::npos);
  // an int beyond 64 bits
  EXPECT_NE(load_error(archive_with(std::string("\x80\x02\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x00\x01.", 14))).find("64 bits"), std::string::npos);
  // negative sizes, strides, offsets
  EXPECT_NE(load_error(archive_with(tensor_pickle(4, 0, {-1}, {1}), {{"0", store}})).find("negative size"), std::string::npos);
  EXPECT_NE(load_error(archive_with(tensor_pickle(4, -1, {1}, {1}), {{"0", store}})).find("negative storage_offset"), std::string::npos);
}

TEST(PtHostile, StorageTooSmallForTheViewIsRefused) {
  const std::string m = load_error(archive_with(tensor_pickle(4, 2, {3}, {1}), {{"0", std::string(16, '\0')}}));
  EXPECT_NE(m.find("too small"), std::string::npos) << m;
  EXPECT_NE(m.find("data/0"), std::string::npos) << m;
  // a missing storage record
  EXPECT_NE(load_error(archive_with(tensor_pickle(4, 0, {4}, {1}))).find("'archive/data/0' is missing"), std::string::npos);
  // empty tensors need no bytes (PyTorch does not check their offset either)
  EXPECT_TRUE(load_error(archive_with(tensor_pickle(0, 7, {0, 3}, {3, 1}), {{"0", ""}})).empty());
}

TEST(PtHostile, DeepNestingIsRefusedWithoutRecursion) {
  const int depth = 200000;
  std::string p = "\x80\x02";
  p += std::string(depth, ']');
  p += std::string(depth - 1, 'a');
  p += '.';
  const std::string m = load_error(archive_with(p));
  EXPECT_NE(m.find("nested"), std::string::npos) << m;
  // within the limit it loads
  std::string ok = "\x80\x02" + std::string(50, ']') + std::string(49, 'a') + ".";
  EXPECT_TRUE(load_error(archive_with(ok)).empty());
  pt::LoadOptions o;
  o.max_depth = 10;
  EXPECT_THROW(pt::load_bytes(archive_with(ok), o), pt::PtFormatError);
}

TEST(PtHostile, RecursiveContainersAreRefused) {
  // l = []; l.append(l)
  EXPECT_NE(load_error(archive_with("\x80\x02]q\x00h\x00" "a."s)).find("contains itself"), std::string::npos);
  // d = {}; d['k'] = [d]
  EXPECT_NE(load_error(archive_with("\x80\x02}q\x00X\x01\x00\x00\x00k]h\x00" "as."s)).find("contains itself"), std::string::npos);
  // a cycle that is not part of the result (then popped) is refused too
  EXPECT_NE(load_error(archive_with("\x80\x02]q\x00h\x00" "a0N."s)).find("contains itself"), std::string::npos);
}

TEST(PtHostile, HugeMemoIndicesCostNothing) {
  // LONG_BINPUT 0xFFFFFFFF then LONG_BINGET of it
  EXPECT_TRUE(load_error(archive_with(std::string("\x80\x02Nr\xff\xff\xff\xffj\xff\xff\xff\xff.", 14))).empty());
  EXPECT_NE(load_error(archive_with(std::string("\x80\x02j\xf0\xff\xff\xff.", 8))).find("never stored"), std::string::npos);
}

TEST(PtHostile, StackMisuseIsAFormatError) {
  for (const std::string& p : {std::string("\x80\x02."), std::string("\x80\x02" "a."), std::string("\x80\x02(\x86."),
                               std::string("\x80\x02" "e."), std::string("\x80\x02}(Nu."), std::string("\x80\x02N"),
                               std::string("\x80\x09N."), std::string("\x80\x02\xff.")}) {
    EXPECT_FALSE(load_error(archive_with(p)).empty()) << "accepted: " << p;
  }
  // unhashable dict keys
  EXPECT_NE(load_error(archive_with("\x80\x02}]Ns.")).find("unhashable"), std::string::npos);
}

TEST(PtHostile, LargeDictsLoadInLinearTime) {
  // 200000 distinct keys: a quadratic key lookup would take minutes
  pt::Pickler p;
  p.proto();
  p.empty_dict();
  p.memoize();
  for (int b = 0; b < 200; ++b) {
    p.mark();
    for (int i = 0; i < 1000; ++i) {
      p.integer(b * 1000 + i);
      p.none();
    }
    p.op(pt::op::SETITEMS);
  }
  p.integer(5);  // a repeated key replaces the value and keeps its place
  p.boolean(true);
  p.op(pt::op::SETITEM);
  p.stop();
  Value v = pt::load_bytes(archive_with(p.take()));
  ASSERT_EQ(v.size(), 200000u);
  EXPECT_TRUE(v.dict_items()[5].second.is_bool());
}

TEST(PtHostile, TorchScriptArchivesAreRefused) {
  std::string out;
  pt::ZipWriter w([&](const void* p, size_t n) { out.append(static_cast<const char*>(p), n); });
  for (const char* name : {"m/data.pkl", "m/constants.pkl", "m/code/__torch__.py", "m/version"})
    w.write_record(name, "\x80\x02N.", 4);
  w.finish();
  const std::string m = load_error(out);
  EXPECT_NE(m.find("TorchScript"), std::string::npos) << m;
}

TEST(PtHostile, UnknownRecordsAreIgnoredAndBadVersionsRefused) {
  std::string out;
  pt::ZipWriter w([&](const void* p, size_t n) { out.append(static_cast<const char*>(p), n); });
  w.write_record("archive/data.pkl", "\x80\x02K\x07.", 5);
  w.write_record("archive/.format_version", "1", 1);
  w.write_record("archive/.data/serialization_id", "123", 3);
  w.write_record("archive/version", "3\n", 2);
  w.finish();
  EXPECT_EQ(pt::load_bytes(out).to_int(), 7);
  std::string bad;
  pt::ZipWriter w2([&](const void* p, size_t n) { bad.append(static_cast<const char*>(p), n); });
  w2.write_record("archive/data.pkl", "\x80\x02K\x07.", 5);
  w2.write_record("archive/version", "99\n", 3);
  w2.finish();
  EXPECT_NE(load_error(bad).find("format version"), std::string::npos);
}

TEST(PtHostile, BigEndianFilesAreByteSwapped) {
  // S15: a `byteorder` record "big" means multi-byte elements are stored big-endian
  std::string be;
  for (int32_t v : {1, -2, 0x01020304}) {
    uint32_t u = static_cast<uint32_t>(v);
    for (int i = 3; i >= 0; --i) be.push_back(static_cast<char>((u >> (8 * i)) & 0xFF));
  }
  std::string out;
  pt::ZipWriter w([&](const void* p, size_t n) { out.append(static_cast<const char*>(p), n); });
  const std::string pkl = tensor_pickle(3, 0, {3}, {1}, "IntStorage");
  w.write_record("archive/data.pkl", pkl.data(), pkl.size());
  w.write_record("archive/byteorder", "big", 3);
  w.write_record("archive/data/0", be.data(), be.size());
  w.write_record("archive/version", "3\n", 2);
  w.finish();
  EXPECT_EQ(pt::load_bytes(out).to_tensor().to_int64_vector(), (std::vector<int64_t>{1, -2, 0x01020304}));
}

TEST(PtHostileWriter, OneStorageAsTwoDtypesIsRefused) {
  loader::Tensor f = loader::Tensor::from_vector<float>({1, 2});
  loader::Tensor i(f.storage(), loader::DType::Int32, {2}, {1}, 0);
  try {
    pt::save_bytes(Value::list({f, i}));
    FAIL();
  } catch (const loader::ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("Cannot save multiple tensors or storages that view the same data as different types"),
              std::string::npos);
  }
  // empty storages are exempt, as in PyTorch (S12)
  loader::Tensor e0 = loader::Tensor::empty({0}, loader::DType::Float32);
  loader::Tensor e1(e0.storage(), loader::DType::Int64, {0}, {1}, 0);
  Value back = pt::load_bytes(pt::save_bytes(Value::list({e0, e1})));
  EXPECT_EQ(back[1].to_tensor().dtype(), loader::DType::Int64);
}

TEST(PtHostileWriter, UnsavableValuesAreValueErrors) {
  Value l = Value::list();
  l.push_back(l);
  EXPECT_THROW(pt::save_bytes(l), loader::ValueError);
  l.items().clear();  // break the cycle so it can be freed
  EXPECT_THROW(pt::save_bytes(Value(std::string("\xff\xfe"))), loader::ValueError);
  EXPECT_THROW(pt::save_bytes(Value(loader::Tensor())), loader::ValueError);
  struct Custom : loader::CustomObject {
    std::string type_name() const override { return "Custom"; }
  };
  EXPECT_THROW(pt::save_bytes(Value::object(std::make_shared<Custom>())), loader::ValueError);
}

}  // namespace
