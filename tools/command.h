// Sub-commands of the `loader` tool register themselves here:
//
//   static int run_split(loader::tool::Args& args);
//   LOADER_TOOL_COMMAND("split", "split --n N --lengths a,b --seed S", run_split);
//
// Args parses "--key value" options and "--flag" switches.  Bad arguments throw
// UsageError, which main() prints with the command's usage and exit status 2.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace loader::tool {

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Args {
 public:
  /// `argv` excludes the program and command names.  `flags` take no value.
  Args(std::vector<std::string> argv, std::set<std::string> flags);

  std::vector<std::string> positional;
  bool flag(const std::string& name);
  std::optional<std::string> get(const std::string& name);
  std::string require(const std::string& name);
  int64_t get_int(const std::string& name, int64_t fallback);
  int64_t require_int(const std::string& name);
  double get_double(const std::string& name, double fallback);
  std::vector<int64_t> get_int_list(const std::string& name);
  std::vector<double> get_double_list(const std::string& name);
  /// Throws UsageError naming any option that was given but never read.
  void finish();

 private:
  std::map<std::string, std::string> values_;
  std::set<std::string> flags_given_;
  std::set<std::string> used_;
};

/// Parses a whole decimal integer or throws UsageError naming `what`.
int64_t parse_int(const std::string& text, const std::string& what);
double parse_double(const std::string& text, const std::string& what);

using CommandFn = int (*)(Args& args);

struct Command {
  std::string name;
  std::string usage;
  std::set<std::string> flags;
  CommandFn fn;
};

void register_command(Command c);

struct CommandRegistrar {
  CommandRegistrar(const char* name, const char* usage, std::set<std::string> flags, CommandFn fn) {
    register_command(Command{name, usage, std::move(flags), fn});
  }
};

#define LOADER_TOOL_CONCAT_INNER(a, b) a##b
#define LOADER_TOOL_CONCAT(a, b) LOADER_TOOL_CONCAT_INNER(a, b)
/// LOADER_TOOL_COMMAND(name, usage, {flags...}, fn)
#define LOADER_TOOL_COMMAND(name, usage, flags, fn)                                     \
  static ::loader::tool::CommandRegistrar LOADER_TOOL_CONCAT(loader_tool_cmd_, __LINE__)( \
      name, usage, std::set<std::string> flags, fn)

}  // namespace loader::tool
