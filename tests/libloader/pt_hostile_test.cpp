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

std::string load_error(const std::string& bytes) {
  try {
    pt::load_bytes(bytes);
  } catch (const pt::PtFormatError& e) {
    return e.what();
  }
  return "";
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

// ---------------------------------------------------------------- legacy files
// The legacy format has no CRC: every mutation reaches the pickles and the records.

struct SysInfo {
  bool little_endian = true;
  int64_t short_size = 2, int_size = 4, long_size = 8;
};

// magic number, protocol version and sys_info, as torch.save writes them
std::string legacy_header(const SysInfo& si = {}, int64_t version = 1001) {
  std::string h("\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19.", 15);
  pt::Pickler v;
  v.proto();
  v.integer(version);
  v.stop();
  h += v.bytes();
  pt::Pickler p;
  p.proto();
  p.empty_dict();
  p.memoize();
  p.mark();
  p.string("protocol_version");
  p.integer(1001);
  p.string("little_endian");
  p.boolean(si.little_endian);
  p.string("type_sizes");
  p.empty_dict();
  p.memoize();
  p.mark();
  p.string("short");
  p.integer(si.short_size);
  p.string("int");
  p.integer(si.int_size);
  p.string("long");
  p.integer(si.long_size);
  p.op(pt::op::SETITEMS);
  p.op(pt::op::SETITEMS);
  p.stop();
  return h + p.bytes();
}

std::string key_list(const std::vector<std::string>& keys) {
  pt::Pickler p;
  p.proto();
  p.empty_list();
  p.memoize();
  p.mark();
  for (const auto& k : keys) p.string(k);
  p.op(pt::op::APPENDS);
  p.stop();
  return p.take();
}

std::string legacy_record(int64_t count, const std::string& bytes) {
  std::string r;
  for (int i = 0; i < 8; ++i) r.push_back(static_cast<char>((static_cast<uint64_t>(count) >> (8 * i)) & 0xFF));
  return r + bytes;
}

// _rebuild_tensor_v2 over ('storage', torch.<cls>, key, 'cpu', numel, view) in a legacy
// object pickle; `view` is pickled as given: "" for None, else (view_key, offset, size).
struct LegacyView {
  std::string key;
  int64_t offset, size;
};
void push_legacy_tensor(pt::Pickler& p, int64_t numel, int64_t offset, std::vector<int64_t> sizes,
                        std::vector<int64_t> strides, const std::string& key, const LegacyView* view,
                        const std::string& storage_class) {
  p.global("torch._utils", "_rebuild_tensor_v2");
  p.mark();
  p.mark();
  p.string("storage");
  p.global("torch", storage_class);
  p.string(key, 1);
  p.string("cpu");
  p.integer(numel);
  if (view) {
    p.string(view->key, 1);
    p.integer(view->offset);
    p.integer(view->size);
    p.tuple_end(3);
  } else {
    p.none();
  }
  p.tuple_end(6);
  rebuild_tensor_tail(p, offset, sizes, strides);
}

std::string legacy_tensor_pickle(int64_t numel, int64_t offset, std::vector<int64_t> sizes, std::vector<int64_t> strides,
                                 const std::string& key = "0", const LegacyView* view = nullptr,
                                 const std::string& storage_class = "FloatStorage") {
  pt::Pickler p;
  p.proto();
  push_legacy_tensor(p, numel, offset, std::move(sizes), std::move(strides), key, view, storage_class);
  p.stop();
  return p.take();
}

const std::string kFloats4("\x00\x00\x80\x3f\x00\x00\x00\x40\x00\x00\x40\x40\x00\x00\x80\x40", 16);  // 1, 2, 3, 4

std::string legacy_float4(const std::string& object) {
  return legacy_header() + object + key_list({"0"}) + legacy_record(4, kFloats4);
}

TEST(PtHostile, CraftedLegacyFilesLoad) {  // the baselines the cases below break
  Value v = pt::load_bytes(legacy_float4(legacy_tensor_pickle(4, 1, {3}, {1})));
  EXPECT_EQ(v.to_tensor().to_double_vector(), (std::vector<double>{2, 3, 4}));
  LegacyView view{"v", 1, 2};
  v = pt::load_bytes(legacy_float4(legacy_tensor_pickle(4, 1, {1}, {1}, "0", &view)));
  EXPECT_EQ(v.to_tensor().to_double_vector(), (std::vector<double>{3}));
  EXPECT_EQ(v.to_tensor().storage()->nbytes(), 8u);
  // bytes after the last record are ignored, as torch.load ignores them
  EXPECT_NO_THROW(pt::load_bytes(legacy_float4(legacy_tensor_pickle(4, 0, {4}, {1})) + "trailing"));
}

const char* const kLegacyGolden[] = {"t_float32.pt", "t_bool.pt", "t_complex64.pt", "t_scalar_0dim.pt",
                                     "t_empty_2x0.pt", "all_dtypes.pt", "view_offset.pt", "view_expand_stride0.pt",
                                     "views_sharing_storage.pt", "shared_storages.pt", "nested.pt", "state_dict.pt",
                                     "parameter.pt", "requires_grad_tensor.pt", "storage_views.pt", "protocol4.pt",
                                     "location_cuda.pt", "module_tiny.pt"};

TEST(PtHostile, LegacyTruncationAtEveryByteIsAFormatError) {
  int cases = 0;
  for (const char* name : kLegacyGolden) {
    const std::string full = read_file(golden_legacy(name));
    for (size_t cut = 0; cut < full.size(); ++cut) {
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
  EXPECT_GT(cases, 9000);
}

// Whatever a mutated legacy file loads to must also save (in both formats) and load back.
void expect_loads_or_fails_cleanly(const std::string& bytes, const std::string& what, int& loaded, int& failed) {
  Value v;
  try {
    v = pt::load_bytes(bytes);
  } catch (const loader::Error&) {
    ++failed;
    return;
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << ": " << e.what();
    return;
  }
  ++loaded;
  for (bool legacy : {false, true}) {
    pt::SaveOptions o;
    o.legacy_format = legacy;
    std::string again;
    try {
      again = pt::save_bytes(v, o);
    } catch (const loader::ValueError&) {
      continue;  // e.g. a str that is not UTF-8
    }
    EXPECT_NO_THROW(pt::load_bytes(again)) << what;
  }
}

TEST(PtHostile, LegacyEveryFlippedByteLoadsOrFailsCleanly) {
  int failed = 0, loaded = 0;
  for (const char* name : kLegacyGolden) {
    const std::string full = read_file(golden_legacy(name));
    for (size_t i = 0; i < full.size(); ++i)
      for (int mask : {0xFF, 0x01, 0x80}) {  // lying counts and sizes are mostly small changes
        std::string bad = full;
        bad[i] = static_cast<char>(bad[i] ^ mask);
        expect_loads_or_fails_cleanly(bad, std::string(name) + " byte " + std::to_string(i), loaded, failed);
      }
  }
  EXPECT_GT(failed, 5000);
  EXPECT_GT(loaded, 5000);  // no CRC: flips in the raw storage bytes load with other values
}

TEST(PtHostile, LegacyRandomMutationsFailCleanly) {
  std::mt19937 rng(4321);
  int failed = 0, loaded = 0;
  for (const char* name : kLegacyGolden) {
    const std::string full = read_file(golden_legacy(name));
    for (int it = 0; it < 300; ++it) {
      std::string m = full;
      const int edits = 1 + static_cast<int>(rng() % 4);
      for (int k = 0; k < edits && !m.empty(); ++k) {
        const size_t pos = rng() % m.size();
        switch (rng() % 4) {
          case 0: m[pos] = static_cast<char>(rng()); break;
          case 1: m.erase(pos, 1 + rng() % 8); break;
          case 2: m.insert(pos, 1, static_cast<char>(rng())); break;
          default: m.insert(pos, m.substr(rng() % m.size(), 1 + rng() % 16)); break;  // a duplicated piece
        }
      }
      expect_loads_or_fails_cleanly(m, std::string(name) + " iteration " + std::to_string(it), loaded, failed);
    }
  }
  EXPECT_GT(failed, loaded);
}

TEST(PtHostile, LegacyLyingCountsAndSizesAreRefusedWithoutAllocating) {
  const std::string header = legacy_header();
  const std::string t4 = legacy_tensor_pickle(4, 0, {4}, {1});
  // three storages that each fit in the file, but not together
  pt::Pickler three;
  three.proto();
  three.empty_list();
  three.mark();
  for (const char* key : {"0", "1", "2"}) push_legacy_tensor(three, 100, 0, {100}, {1}, key, nullptr, "FloatStorage");
  three.op(pt::op::APPENDS);
  three.stop();
  const std::string three_storages_of_100_floats = three.take();
  ASSERT_LT(header.size() + three_storages_of_100_floats.size() + 40, 800u);
  const LegacyView past{"v", 3, 2}, negative{"v", -1, 1}, huge{"v", 2, int64_t{1} << 62}, root_key{"0", 1, 2},
      two{"v", 1, 2};
  struct Case {
    std::string file, message;
  };
  const std::vector<Case> cases = {
      // the record's count disagrees with the pickle's numel
      {header + t4 + key_list({"0"}) + legacy_record(5, kFloats4 + "abcd"), "holds 5 elements, but the object pickle declares 4"},
      {header + t4 + key_list({"0"}) + legacy_record(int64_t{1} << 62, kFloats4), "declares 4"},
      {header + t4 + key_list({"0"}) + legacy_record(-1, kFloats4), "holds -1 elements"},
      // the pickle's numel larger than the file, or overflowing numel * element size
      {header + legacy_tensor_pickle(int64_t{1} << 40, 0, {1}, {1}) + key_list({"0"}) + legacy_record(int64_t{1} << 40, ""),
       "more than the whole file"},
      {header + legacy_tensor_pickle(int64_t{1} << 62, 0, {1}, {1}) + key_list({"0"}), "overflows"},
      {header + three_storages_of_100_floats + key_list({}), "with the storages before it is more than the whole file"},
      {header + legacy_tensor_pickle(-4, 0, {1}, {1}) + key_list({"0"}), "negative storage numel"},
      // records cut short
      {header + t4 + key_list({"0"}) + legacy_record(4, kFloats4.substr(0, 15)), "truncated file"},
      {header + t4 + key_list({"0"}) + std::string("\x04\x00\x00", 3), "8-byte element count"},
      // the key list and the pickle disagree
      {header + t4 + key_list({"1"}) + legacy_record(4, kFloats4), "names storage '1', which the object pickle does not use"},
      {header + t4 + key_list({}) + legacy_record(4, kFloats4), "does not name it"},
      {header + t4 + key_list({"0", "0"}) + legacy_record(4, kFloats4) + legacy_record(4, kFloats4), "twice"},
      {header + t4 + "\x80\x02K\x07." + legacy_record(4, kFloats4), "not a list"},
      {header + t4 + "\x80\x02]N\x85." + legacy_record(4, kFloats4), "storage key list offset"},
      {header + t4 + "\x80\x02]ctorch\nFloatStorage\na." + legacy_record(4, kFloats4), "Unsupported global"},
      {header + t4, "legacy storage key list offset"},
      // a view that is too small for the tensor, or lies outside its storage
      {header + legacy_tensor_pickle(4, 2, {3}, {1}) + key_list({"0"}) + legacy_record(4, kFloats4), "too small"},
      {legacy_float4(legacy_tensor_pickle(4, 0, {1}, {1}, "0", &past)),
       "do not lie inside"},
      {legacy_float4(legacy_tensor_pickle(4, 0, {1}, {1}, "0", &negative)),
       "do not lie inside"},
      {legacy_float4(legacy_tensor_pickle(4, 0, {1}, {1}, "0", &huge)),
       "do not lie inside"},
      {legacy_float4(legacy_tensor_pickle(4, 0, {1}, {1}, "0", &root_key)),
       "also a storage key"},
      {legacy_float4(legacy_tensor_pickle(4, 0, {3}, {1}, "0", &two)),
       "too small"},
      // the zip format's 5-tuple persistent id
      {header + tensor_pickle(4, 0, {4}, {1}) + key_list({"0"}) + legacy_record(4, kFloats4), "expected ('storage', type, key, location, numel, view_metadata)"},
  };
  for (const auto& c : cases) {
    const std::string m = load_error(c.file);
    EXPECT_NE(m.find(c.message), std::string::npos) << "want '" << c.message << "', got: " << m;
  }
}

TEST(PtHostile, LegacyHeadersThatDoNotFitAreRefused) {
  const std::string body = legacy_tensor_pickle(4, 0, {4}, {1}) + key_list({"0"}) + legacy_record(4, kFloats4);
  EXPECT_TRUE(load_error(legacy_header() + body).empty());
  SysInfo be;
  be.little_endian = false;
  EXPECT_NE(load_error(legacy_header(be) + body).find("big-endian"), std::string::npos);
  SysInfo odd;
  odd.long_size = 16;
  EXPECT_NE(load_error(legacy_header(odd) + body).find("long=16"), std::string::npos);
  odd = {};
  odd.int_size = 8;
  EXPECT_NE(load_error(legacy_header(odd) + body).find("type sizes"), std::string::npos);
  SysInfo windows;
  windows.long_size = 4;  // Windows, and what torch writes everywhere ('=l')
  EXPECT_TRUE(load_error(legacy_header(windows) + body).empty());
  EXPECT_NE(load_error(legacy_header({}, 1000) + body).find("Invalid protocol version: 1000"), std::string::npos);
  // a magic number one bit off is not the legacy format
  std::string bad_magic = legacy_header() + body;
  bad_magic[9] ^= 1;
  EXPECT_NE(load_error(bad_magic).find("magic number"), std::string::npos);
  // sys_info that is not a dict, or holds a global
  const std::string magic_and_version = legacy_header().substr(0, 15 + 6);
  EXPECT_NE(load_error(magic_and_version + "\x80\x02K\x01." + body).find("sys_info is a int"), std::string::npos);
  EXPECT_NE(load_error(magic_and_version + "\x80\x02" "cos\nsystem\n." + body).find("Unsupported global: GLOBAL os.system"),
            std::string::npos);
  // the magic number in protocol 1 and 4 spellings is accepted
  const std::string rest = legacy_header().substr(15);
  EXPECT_TRUE(load_error("L119547037146038801333356L\n." + rest + body).empty());
  EXPECT_TRUE(load_error(std::string("\x80\x04\x95\x0d\x00\x00\x00\x00\x00\x00\x00\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19.", 24) +
                         rest + body).empty());
  // a pickle that is not the magic number, and a file cut inside it
  EXPECT_NE(load_error("\x80\x02K\x01." + rest + body).find("magic number"), std::string::npos);
  EXPECT_NE(load_error(legacy_header().substr(0, 7)).find("magic number"), std::string::npos);
}

TEST(PtHostile, LegacyForbiddenGlobalsAndPickledModulesAreRefused) {
  auto file = [](const std::string& object) { return legacy_header() + object + key_list({}); };
  // a forbidden call names the global
  std::string m = load_error(file("\x80\x02" "cos\nsystem\nX\x02\x00\x00\x00ls\x85R."s));
  EXPECT_NE(m.find("Unsupported global: GLOBAL os.system"), std::string::npos) << m;
  EXPECT_NE(m.find("legacy object pickle"), std::string::npos) << m;
  // ... so does one that is never used, or left in the result
  m = load_error(file("\x80\x02" "cos\nsystem\n0N."));
  EXPECT_NE(m.find("Unsupported global: GLOBAL os.system"), std::string::npos) << m;
  m = load_error(file("\x80\x02" "cos\nsystem\n."));
  EXPECT_NE(m.find("Unsupported global: GLOBAL os.system"), std::string::npos) << m;
  m = load_error(file("\x80\x02]cos\nsystem\na."));
  EXPECT_NE(m.find("Unsupported global: GLOBAL os.system"), std::string::npos) << m;
  // two forbidden globals in a row
  m = load_error(file("\x80\x02" "cos\nsystem\ncposix\nsystem\n."));
  EXPECT_NE(m.find("Unsupported global: GLOBAL os.system"), std::string::npos) << m;
  // a whole pickled module: ('module', <class>, source_file, source)
  m = load_error(file("\x80\x02(X\x06\x00\x00\x00modulec__main__\nNet\nNNtQ."s));
  EXPECT_NE(m.find("('module', __main__.Net"), std::string::npos) << m;
  EXPECT_NE(m.find("torch.nn.Module"), std::string::npos) << m;
  // ... even when its class happens to be allowed
  m = load_error(file("\x80\x02(X\x06\x00\x00\x00modulectorch\nTensor\nNNtQ."s));
  EXPECT_NE(m.find("torch.nn.Module"), std::string::npos) << m;
  // another kind of persistent id
  m = load_error(file("\x80\x02(X\x03\x00\x00\x00" "fooK\x01tQ."s));
  EXPECT_NE(m.find("Only persistent_load of storage is allowed, but got 'foo'"), std::string::npos) << m;
  // in the zip format a refused global stops at once, as before
  m = load_error(archive_with("\x80\x02" "cos\nsystem\n0N."));
  EXPECT_NE(m.find("offset 2 (GLOBAL): Unsupported global: GLOBAL os.system"), std::string::npos) << m;
}

TEST(PtHostile, LegacyDeepNestingAndHugeMemoIndicesAreHarmless) {
  const int depth = 200000;
  std::string p = "\x80\x02";
  p += std::string(depth, ']');
  p += std::string(depth - 1, 'a');
  p += '.';
  EXPECT_NE(load_error(legacy_header() + p + key_list({})).find("nested"), std::string::npos);
  EXPECT_TRUE(load_error(legacy_header() + std::string("\x80\x02Nr\xff\xff\xff\xffj\xff\xff\xff\xff.", 14) + key_list({})).empty());
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
