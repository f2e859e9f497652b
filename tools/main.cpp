// The `loader` command-line tool: see `loader --help`, `loader <command> --help`.
#include <cerrno>
#include <cstdlib>
#include <iostream>

#include "command.h"
#include "loader/error.h"
#include "loader/serve_cli.h"
#include "loader/worker_main.h"

#ifndef LOADER_VERSION
#error "LOADER_VERSION (the project version) is defined by CMakeLists.txt"
#endif

namespace loader::tool {

namespace {
int g_status = 0;
const CLI::App* g_running = nullptr;  // the command whose function runs (for messages)

/// "pt dump" for the subcommand `dump` of `pt`.
std::string command_path(const CLI::App* cmd) {
  std::string path;
  for (; cmd && cmd->get_parent(); cmd = cmd->get_parent()) path = cmd->get_name() + (path.empty() ? "" : " " + path);
  return path;
}
}  // namespace

void on_run(CLI::App* cmd, std::function<int()> fn) {
  cmd->callback([cmd, fn = std::move(fn)] {
    g_running = cmd;
    g_status = fn();
  });
}

void require_subcommand(CLI::App* group) {
  group->callback([group] {
    if (!group->get_subcommands().empty()) return;
    std::string names;
    for (const CLI::App* sub : group->get_subcommands({})) names += (names.empty() ? "" : ", ") + sub->get_name();
    throw CLI::RequiredError("A subcommand (" + names + ")");
  });
}

int64_t parse_int(const std::string& text, const std::string& what) {
  if (text.empty()) throw UsageError(what + ": expected an integer, got an empty string");
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (errno != 0 || end == text.c_str() || *end != '\0')
    throw UsageError(what + ": expected an integer, got '" + text + "'");
  return v;
}

double parse_double(const std::string& text, const std::string& what) {
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(text.c_str(), &end);
  if (text.empty() || errno != 0 || end == text.c_str() || *end != '\0')
    throw UsageError(what + ": expected a number, got '" + text + "'");
  return v;
}

const CLI::Validator kInt64(
    [](std::string& text) -> std::string {
      try {
        parse_int(text, "");
      } catch (const UsageError&) {
        return "expected an integer, got '" + text + "'";
      }
      return "";
    },
    "INT", "int64");

namespace {
std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  if (s.empty()) return out;
  size_t start = 0;
  while (true) {
    auto pos = s.find(',', start);
    out.push_back(s.substr(start, pos == std::string::npos ? std::string::npos : pos - start));
    if (pos == std::string::npos) break;
    start = pos + 1;
  }
  return out;
}
}  // namespace

std::vector<int64_t> parse_int_list(const std::string& text, const std::string& what) {
  std::vector<int64_t> out;
  for (const auto& part : split_commas(text)) out.push_back(parse_int(part, what));
  return out;
}

std::vector<double> parse_double_list(const std::string& text, const std::string& what) {
  std::vector<double> out;
  for (const auto& part : split_commas(text)) out.push_back(parse_double(part, what));
  return out;
}

}  // namespace loader::tool

int main(int argc, char** argv) {
  using namespace loader::tool;
  if (auto rc = loader::runtime::run_worker_if_requested(argc, argv)) return *rc;

  CLI::App app{"loader: PyTorch-style data loading from C++; this tool inspects .pt files, prints the index "
               "sequences of the samplers and runs the benchmarks.",
               "loader"};
  app.set_version_flag("--version", LOADER_VERSION, "Print the version of loader and exit");
  require_subcommand(&app);
  app.footer("Run `loader <command> --help` for the options of a command.");
  add_pt_commands(app);
  add_sampler_commands(app);
  add_bench_command(app);
  add_gpu_check_command(app);
  add_images_commands(app);
  // A worker host (loader/serve.h): its options from loader/serve_cli.h, as a program
  // with dataset types of its own declares them.
  {
    auto* serve = app.add_subcommand("serve", "Host workers for main processes on other machines (docs/remote.md)");
    auto o = std::make_shared<loader::runtime::ServeOptions>();
    loader::runtime::add_serve_options(*serve, *o);
    on_run(serve, [o] { return loader::runtime::serve(*o); });
  }

  try {
    app.parse(argc, argv);
    return g_status;
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0 (CLI11 prints them); every parse error exits 2.
    return app.exit(e) == 0 ? 0 : 2;
  } catch (const UsageError& e) {
    const std::string name = command_path(g_running);
    std::cerr << "loader " << name << ": " << e.what() << "\nRun `loader " << name << " --help` for its usage.\n";
    return 2;
  } catch (const loader::Error& e) {
    std::cerr << "loader " << command_path(g_running) << ": " << e.python_type() << ": " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "loader " << command_path(g_running) << ": " << e.what() << "\n";
    return 1;
  }
}
