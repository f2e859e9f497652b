// The `loader` tool's command line (CLI11): help at every level, --version, and exit
// status 2 with a message naming the problem for bad arguments.
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>

#include "pt_test_util.h"

namespace {

using namespace loader::testing;

const std::string kTool = std::string(LOADER_BINARY_DIR) + "/loader";

#define REQUIRE_TOOL() \
  if (!std::filesystem::exists(kTool)) GTEST_SKIP() << "the loader tool is not built at " << kTool

CommandResult tool(const std::string& args) { return run_command(shell_quote(kTool) + " " + args + " 2>&1"); }

TEST(ToolCli, HelpAtEveryLevel) {
  REQUIRE_TOOL();
  const std::pair<const char*, std::vector<const char*>> cases[] = {
      {"--help", {"Usage: loader", "pt", "sampler", "split", "bench", "gpu-check", "images", "--version"}},
      {"pt --help", {"Usage: loader pt", "dump", "copy"}},
      {"pt dump --help", {"Usage: loader pt dump", "FILE", "--max-values", "--all-values", "--indent"}},
      {"pt copy -h", {"Usage: loader pt copy", "IN", "OUT", "--legacy-format", "--no-byteorder", "--archive-name"}},
      {"sampler --help", {"random", "subset", "weighted", "distributed", "batch", "equibatch"}},
      {"sampler random --help", {"--n", "--seed", "--replacement", "--num-samples", "--epochs"}},
      {"split --help", {"--n", "--lengths", "--seed"}},
      {"bench --help", {"--workload", "--memcpy", "--memcpy-mb", "--reps", "--prefetch-factor", "--no-in-order"}},
      {"gpu-check --help", {"--quick", "--mb", "--repeats", "--device"}},
      {"serve --help", {"Usage: loader serve", "--listen", "--token-file", "--tls-cert", "--tls-key", "--tls-ca",
                        "--stats-every-ms", "--timeout-ms", "--bulk-port", "--no-bulk"}},
  };
  for (const auto& [args, want] : cases) {
    SCOPED_TRACE(args);
    auto r = tool(args);
    EXPECT_EQ(r.status, 0) << r.output;
    for (const char* w : want) EXPECT_NE(r.output.find(w), std::string::npos) << w << "\n" << r.output;
  }
}

TEST(ToolCli, VersionIsTheProjectVersion) {
  REQUIRE_TOOL();
  std::smatch m;
  const std::string cmake = read_file(std::string(LOADER_SOURCE_DIR) + "/CMakeLists.txt");
  ASSERT_TRUE(std::regex_search(cmake, m, std::regex(R"(project\(loader VERSION ([0-9.]+))")));
  auto r = tool("--version");
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.output, m[1].str() + "\n");
}

TEST(ToolCli, BadArgumentsExitTwoWithCli11sMessage) {
  REQUIRE_TOOL();
  const std::pair<const char*, const char*> cases[] = {
      {"", "A subcommand (pt, sampler, split, bench, gpu-check, images, serve) is required"},
      {"nonsense", "not expected: nonsense"},
      {"pt", "A subcommand (dump, copy) is required"},
      {"pt nonsense x.pt", "not expected"},
      {"sampler nonsense --n 3", "not expected"},
      {"pt dump --bogus", "--bogus"},                                       // an unknown option, not "needs a value"
      {"pt dump", "FILE is required"},
      {"pt dump x.pt --indent", "--indent"},                                // a missing value
      {"pt dump x.pt --indent 17", "--indent"},                             // out of range
      {"pt copy onlyone.pt", "OUT is required"},
      {"sampler random --n 10", "--seed is required"},
      {"sampler random --n 0x10 --seed 1", "expected an integer, got '0x10'"},
      {"sampler random --n 99999999999999999999 --seed 1", "expected an integer"},  // no clamping
      {"sampler random --n 10 --seed 1 --bogus 1", "--bogus"},
      {"sampler batch --n 10 --batch-size 2 --seed 4", "--seed requires --shuffle"},
      {"sampler equibatch --labels x.json --batch-size 2 --balanced-coef 1 --seed 0 --rank 0", "--rank requires"},
      {"bench --in-order --no-in-order --workload W1", "excludes"},
      {"bench --workload W1 --reps 3", "--reps requires --memcpy"},
      {"serve", "--listen is required"},
      {"serve --listen 127.0.0.1:0", "--token-file is required"},
      {"serve --listen 127.0.0.1:0 --token-file t --bogus", "--bogus"},
      {"serve --listen 127.0.0.1:0 --token-file t --bulk-port 70000", "--bulk-port"},
      {"serve --listen 127.0.0.1:0 --token-file t --bulk-port 7000 --no-bulk", "excludes"},
      {"serve --listen 127.0.0.1:0 --token-file /nonexistent/token", "/nonexistent/token"},  // checked by serve()
  };
  for (const auto& [args, want] : cases) {
    SCOPED_TRACE(args);
    auto r = tool(args);
    EXPECT_EQ(r.status, 2) << r.output;
    EXPECT_NE(r.output.find(want), std::string::npos) << r.output;
  }
}

}  // namespace
