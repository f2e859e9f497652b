// The `loader` command-line tool: see `loader --help`.
#include <cerrno>
#include <cstdlib>
#include <iostream>
#include <map>

#include "command.h"
#include "loader/error.h"
#include "loader/worker_main.h"

namespace loader::tool {

namespace {
std::map<std::string, Command>& commands() {
  static std::map<std::string, Command> c;
  return c;
}

void print_usage(std::ostream& os) {
  os << "usage: loader <command> [options]\n\ncommands:\n";
  for (const auto& [name, c] : commands()) os << "  loader " << c.usage << "\n";
}
}  // namespace

void register_command(Command c) { commands()[c.name] = std::move(c); }

Args::Args(std::vector<std::string> argv, std::set<std::string> flags) {
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (a.rfind("--", 0) == 0 && a.size() > 2) {
      std::string key = a.substr(2);
      auto eq = key.find('=');
      if (eq != std::string::npos) {
        values_[key.substr(0, eq)] = key.substr(eq + 1);
      } else if (flags.count(key)) {
        flags_given_.insert(key);
      } else {
        if (i + 1 >= argv.size()) throw UsageError("option --" + key + " needs a value");
        values_[key] = argv[++i];
      }
    } else {
      positional.push_back(a);
    }
  }
}

bool Args::flag(const std::string& name) {
  used_.insert(name);
  return flags_given_.count(name) > 0;
}

std::optional<std::string> Args::get(const std::string& name) {
  used_.insert(name);
  auto it = values_.find(name);
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

std::string Args::require(const std::string& name) {
  auto v = get(name);
  if (!v) throw UsageError("missing required option --" + name);
  return *v;
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

int64_t Args::get_int(const std::string& name, int64_t fallback) {
  auto v = get(name);
  return v ? parse_int(*v, "--" + name) : fallback;
}

int64_t Args::require_int(const std::string& name) { return parse_int(require(name), "--" + name); }

double Args::get_double(const std::string& name, double fallback) {
  auto v = get(name);
  return v ? parse_double(*v, "--" + name) : fallback;
}

static std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    auto pos = s.find(',', start);
    out.push_back(s.substr(start, pos - start));
    if (pos == std::string::npos) break;
    start = pos + 1;
  }
  return out;
}

std::vector<int64_t> Args::get_int_list(const std::string& name) {
  std::vector<int64_t> out;
  auto v = get(name);
  if (!v) return out;
  if (v->empty()) return out;
  for (const auto& part : split_commas(*v)) out.push_back(parse_int(part, "--" + name));
  return out;
}

std::vector<double> Args::get_double_list(const std::string& name) {
  std::vector<double> out;
  auto v = get(name);
  if (!v || v->empty()) return out;
  for (const auto& part : split_commas(*v)) out.push_back(parse_double(part, "--" + name));
  return out;
}

void Args::finish() {
  for (const auto& kv : values_)
    if (!used_.count(kv.first)) throw UsageError("unknown option --" + kv.first);
  for (const auto& f : flags_given_)
    if (!used_.count(f)) throw UsageError("unknown option --" + f);
}

}  // namespace loader::tool

int main(int argc, char** argv) {
  using namespace loader::tool;
  if (auto rc = loader::runtime::run_worker_if_requested(argc, argv)) return *rc;
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
    print_usage(argc < 2 ? std::cerr : std::cout);
    return argc < 2 ? 2 : 0;
  }
  // Commands may have two words ("pt dump", "sampler random"): try the longest match.
  std::string name = argv[1];
  int consumed = 2;
  if (argc >= 3 && commands().count(name + " " + argv[2])) {
    name = name + " " + argv[2];
    consumed = 3;
  }
  auto it = commands().find(name);
  if (it == commands().end()) {
    std::cerr << "loader: unknown command '" << name << "'\n";
    print_usage(std::cerr);
    return 2;
  }
  std::vector<std::string> rest(argv + consumed, argv + argc);
  for (const auto& a : rest)
    if (a == "--help" || a == "-h") {
      std::cout << "usage: loader " << it->second.usage << "\n";
      return 0;
    }
  try {
    Args args(rest, it->second.flags);
    return it->second.fn(args);
  } catch (const UsageError& e) {
    std::cerr << "loader " << name << ": " << e.what() << "\nusage: loader " << it->second.usage << "\n";
    return 2;
  } catch (const loader::Error& e) {
    std::cerr << "loader " << name << ": " << e.python_type() << ": " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "loader " << name << ": " << e.what() << "\n";
    return 1;
  }
}
