// The zip layer: what PyTorch's PyTorchStreamWriter/Reader and Python's zipfile agree on.
#include <gtest/gtest.h>
#include <zlib.h>

#include "loader/serialization/pt.h"
#include "loader/serialization/zip.h"
#include "pt_test_util.h"

namespace {

using loader::Value;
namespace pt = loader::pt;
using namespace loader::testing;

std::string zip_of(const std::vector<std::pair<std::string, std::string>>& records, bool zip64 = false) {
  std::string out;
  pt::ZipWriterOptions o;
  o.force_zip64 = zip64;
  pt::ZipWriter w([&](const void* p, size_t n) { out.append(static_cast<const char*>(p), n); }, o);
  for (const auto& [name, data] : records) w.write_record(name, data.data(), data.size());
  w.finish();
  return out;
}

std::shared_ptr<pt::ByteSource> mem(const std::string& s) { return pt::ByteSource::from_memory(s.data(), s.size()); }

// S1: records a, b, c/d round trip through the writer and reader.
TEST(PtZip, RecordsRoundTrip) {
  for (bool zip64 : {false, true}) {
    SCOPED_TRACE(zip64 ? "zip64" : "zip32");
    std::string big(100000, '\0');
    for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 7);
    const std::string bytes = zip_of({{"a", "abc"}, {"b", ""}, {"c/d", big}}, zip64);
    pt::ZipReader r(mem(bytes));
    ASSERT_EQ(r.entries().size(), 3u);
    EXPECT_EQ(r.read(*r.find("a")), "abc");
    EXPECT_EQ(r.read(*r.find("b")), "");
    EXPECT_EQ(r.read(*r.find("c/d")), big);
    EXPECT_EQ(r.find("missing"), nullptr);
    for (const auto& e : r.entries()) EXPECT_EQ(e.data_offset % 64, 0u) << e.name;
  }
}

TEST(PtZip, DataIsAlignedTo64ForEveryNameLength) {
  std::vector<std::pair<std::string, std::string>> recs;
  for (int len = 1; len <= 70; ++len) recs.emplace_back(std::string(static_cast<size_t>(len), 'n') + std::to_string(len), std::string(static_cast<size_t>(len), 'x'));
  const std::string bytes = zip_of(recs);
  pt::ZipReader r(mem(bytes));
  ASSERT_EQ(r.entries().size(), recs.size());
  for (const auto& e : r.entries()) {
    EXPECT_EQ(e.data_offset % 64, 0u) << e.name;
    EXPECT_EQ(e.method, 0);
  }
}

TEST(PtZip, PythonZipfileReadsOurArchivesAndValidatesCrcs) {
  if (plain_python().empty()) GTEST_SKIP() << "python3 not found: cannot cross-check with zipfile";
  TempDir dir;
  for (bool zip64 : {false, true}) {
    const std::string path = dir.file(zip64 ? "z64.zip" : "z32.zip");
    write_file(path, zip_of({{"a", "abc"}, {"b", ""}, {"c/d", std::string(5000, 'q')}}, zip64));
    auto r = run_command(plain_python() + " -c 'import sys,zipfile; z=zipfile.ZipFile(sys.argv[1]); "
                         "assert z.testzip() is None; print(\",\".join(z.namelist()), len(z.read(\"c/d\")))' " +
                         shell_quote(path) + " 2>&1");
    EXPECT_EQ(r.status, 0) << r.output;
    EXPECT_EQ(r.output, "a,b,c/d 5000\n");
  }
}

TEST(PtZip, ReadsDeflatedRecordsWrittenByPythonZipfile) {
  if (plain_python().empty()) GTEST_SKIP() << "python3 not found";
  TempDir dir;
  // repack a golden file with DEFLATE (as a user's zip tool might)
  const std::string path = dir.file("deflated.pt");
  auto r = run_command(plain_python() + " -c 'import sys,zipfile; s=zipfile.ZipFile(sys.argv[1]); "
                       "d=zipfile.ZipFile(sys.argv[2],\"w\",zipfile.ZIP_DEFLATED)\n"
                       "for n in s.namelist(): d.writestr(n, s.read(n))\nd.close()' " +
                       shell_quote(golden_pt("t_large_f32_1000.pt")) + " " + shell_quote(path) + " 2>&1");
  ASSERT_EQ(r.status, 0) << r.output;
  pt::ZipReader z(pt::ByteSource::from_file(path));
  EXPECT_EQ(z.entries()[1].method, 8);
  Value v = pt::load(path);
  EXPECT_EQ(v.to_tensor().at<float>({999}), 499.5f);
  pt::LoadOptions mm;
  mm.mmap = true;  // deflated records cannot be mapped: they are inflated into heap storages
  EXPECT_EQ(pt::load(path, mm).to_tensor().storage()->kind(), loader::MemoryKind::Heap);
}

// S5: bytes before the archive (torch.load after f.seek(6)).
TEST(PtZip, ArchiveAfterAHeaderIsFound) {
  std::string file = "HEADER" + read_file(golden_pt("t_int32.pt"));
  pt::ZipReader z(mem(file));
  EXPECT_EQ(z.archive_start(), 6u);
  Value v = pt::load_bytes(file);
  EXPECT_EQ(v.to_tensor().to_int64_vector(), (std::vector<int64_t>{0, -1, 2147483647, -2147483648LL}));
}

// S4: a payload that looks like a zip end record does not fool the reader.
TEST(PtZip, PayloadThatLooksLikeAnEndRecordIsData) {
  std::vector<uint8_t> fake = {'P', 'K', 5, 6};
  for (int i = 0; i < 40; ++i) fake.push_back(static_cast<uint8_t>(i));
  loader::Tensor t = loader::Tensor::from_vector<uint8_t>(fake);
  Value back = pt::load_bytes(pt::save_bytes(Value(t)));
  EXPECT_TRUE(back.to_tensor().equal(t));
}

TEST(PtZip, CrcMismatchNamesTheRecord) {
  std::string bytes = read_file(golden_pt("t_float32.pt"));
  bytes[320] = static_cast<char>(bytes[320] ^ 0x01);  // first data byte of t_float32/data/0
  try {
    pt::load_bytes(bytes);
    FAIL() << "corrupt data loaded";
  } catch (const pt::PtFormatError& e) {
    EXPECT_NE(std::string(e.what()).find("CRC-32 mismatch in record 't_float32/data/0'"), std::string::npos) << e.what();
  }
  pt::LoadOptions o;
  o.verify_crc = false;
  EXPECT_NO_THROW(pt::load_bytes(bytes, o));
}

std::string deflate_raw(const std::string& in) {
  z_stream zs{};
  deflateInit2(&zs, 9, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY);
  std::string out(deflateBound(&zs, in.size()), '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  zs.avail_in = static_cast<uInt>(in.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  deflate(&zs, Z_FINISH);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

// A one-record archive whose entry is DEFLATE with the given claimed sizes.
std::string deflate_zip(const std::string& name, const std::string& compressed, uint32_t claimed, uint32_t crc) {
  auto le = [](std::string& s, uint64_t v, int n) {
    for (int i = 0; i < n; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
  };
  std::string f;
  le(f, 0x04034b50, 4); le(f, 20, 2); le(f, 0, 2); le(f, 8, 2); le(f, 0, 4);
  le(f, crc, 4); le(f, compressed.size(), 4); le(f, claimed, 4); le(f, name.size(), 2); le(f, 0, 2);
  f += name + compressed;
  const size_t cd = f.size();
  le(f, 0x02014b50, 4); le(f, 20, 2); le(f, 20, 2); le(f, 0, 2); le(f, 8, 2); le(f, 0, 4);
  le(f, crc, 4); le(f, compressed.size(), 4); le(f, claimed, 4); le(f, name.size(), 2);
  le(f, 0, 2); le(f, 0, 2); le(f, 0, 2); le(f, 0, 2); le(f, 0, 4); le(f, 0, 4);
  f += name;
  const size_t cd_size = f.size() - cd;
  le(f, 0x06054b50, 4); le(f, 0, 2); le(f, 0, 2); le(f, 1, 2); le(f, 1, 2);
  le(f, cd_size, 4); le(f, cd, 4); le(f, 0, 2);
  return f;
}

TEST(PtZip, ZipBombsAreRefusedBeforeInflating) {
  const std::string zeros(1 << 20, '\0');
  const std::string packed = deflate_raw(zeros);
  const uint32_t crc = static_cast<uint32_t>(crc32(0, reinterpret_cast<const Bytef*>(zeros.data()), static_cast<uInt>(zeros.size())));
  // (the archives must outlive the readers: a memory source does not copy)
  const std::string honest = deflate_zip("x", packed, 1 << 20, crc);
  {
    pt::ZipReader r(mem(honest));
    EXPECT_EQ(r.read(r.entries()[0]), zeros);
  }
  // claims more than deflate can expand the compressed bytes to
  const std::string bomb = deflate_zip("x", packed.substr(0, 10), 0xFFFFFFF0u, crc);
  EXPECT_THROW(pt::ZipReader{mem(bomb)}, pt::PtFormatError);
  // a record over the configured limit
  pt::ZipLimits small;
  small.max_inflated_bytes = 1000;
  try {
    pt::ZipReader r(mem(honest), small);
    FAIL() << "limit not applied";
  } catch (const pt::PtFormatError& e) {
    EXPECT_NE(std::string(e.what()).find("max_inflated_bytes"), std::string::npos) << e.what();
  }
  const std::string too_small = deflate_zip("x", packed, 1000, crc);
  {  // declared smaller than the real output
    pt::ZipReader r(mem(too_small));
    EXPECT_THROW(r.read(r.entries()[0]), pt::PtFormatError);
  }
  const std::string too_large = deflate_zip("x", packed, (1 << 20) + 5, crc);
  {  // declared larger than the real output
    pt::ZipReader r(mem(too_large));
    EXPECT_THROW(r.read(r.entries()[0]), pt::PtFormatError);
  }
}

TEST(PtZip, OverlappingRecordsAreRefused) {
  // record a claims 300 bytes, running over b's local header: the "overlapping files"
  // zip bomb shares data between entries this way
  std::string bytes = zip_of({{"a", std::string(100, 'a')}, {"b", std::string(100, 'b')}});
  const size_t cd = bytes.find("PK\x01\x02");
  ASSERT_NE(cd, std::string::npos);
  for (size_t field : {cd + 20, cd + 24}) {
    bytes[field] = 0x2C;  // 300
    bytes[field + 1] = 0x01;
  }
  try {
    pt::ZipReader r(mem(bytes));
    FAIL() << "overlap accepted";
  } catch (const pt::PtFormatError& e) {
    EXPECT_NE(std::string(e.what()).find("overlap"), std::string::npos) << e.what();
  }
}

TEST(PtZip, NotAZipArchiveIsAClearError) {
  for (const std::string& junk : {std::string(""), std::string("hello"), std::string(5000, 'x')}) {
    try {
      pt::load_bytes(junk);
      FAIL() << "junk loaded";
    } catch (const pt::PtFormatError& e) {
      std::string m = e.what();
      EXPECT_TRUE(m.find("zip archive") != std::string::npos || m.find("end-of-central-directory") != std::string::npos) << m;
    }
  }
}

TEST(PtZip, MissingFileIsARuntimeErrorNamingIt) {
  try {
    pt::load("/nonexistent/dir/x.pt");
    FAIL();
  } catch (const loader::RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/dir/x.pt"), std::string::npos);
  }
}

}  // namespace
