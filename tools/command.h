// The commands of the `loader` tool, on CLI11.  Each command file provides one add_*
// function (declared below, called by main()) that declares its subcommand and its
// options up front and says what runs once they are parsed:
//
//   void add_split_command(CLI::App& app) {
//     auto* cmd = app.add_subcommand("split", "random_split's index lists as JSON");
//     auto o = std::make_shared<SplitOptions>();
//     cmd->add_option("--n", o->n, "dataset length")->required();
//     on_run(cmd, [o] { return run_split(*o); });
//   }
//
// Exit status: 2 for bad arguments (CLI11's parse errors, and UsageError thrown by a
// command for values it rejects), 1 for loader::Error and other failures (a file that
// cannot be read or written), else what the command returns.
#pragma once

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace loader::tool {

/// Bad arguments found after parsing (values a command rejects): exit status 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Checks that an option's text is a whole decimal int64 ("12", "-3"), as parse_int:
/// CLI11 2.1 alone would take "0x10" and clamp out-of-range numbers.  Every integer
/// option has it: cmd->add_option("--n", n)->check(kInt64).
extern const CLI::Validator kInt64;

/// Runs `fn` when `cmd` is the command given; its return value is the exit status.
void on_run(CLI::App* cmd, std::function<int()> fn);

/// A command made of subcommands ("pt", "sampler", the tool itself): without one, the
/// error names them.  (Not CLI11's require_subcommand, which would report
/// `loader nonsense` as a missing subcommand rather than an unexpected argument.)
void require_subcommand(CLI::App* group);

/// Parses a whole decimal integer or throws UsageError naming `what`.
int64_t parse_int(const std::string& text, const std::string& what);
double parse_double(const std::string& text, const std::string& what);
/// "1,2,3" as integers / numbers ("" is an empty list); UsageError naming `what`.
std::vector<int64_t> parse_int_list(const std::string& text, const std::string& what);
std::vector<double> parse_double_list(const std::string& text, const std::string& what);

// ---- the commands (one function per command file)
void add_pt_commands(CLI::App& app);         // pt_cmd.cpp: pt dump, pt copy
void add_sampler_commands(CLI::App& app);    // sampler_cmd.cpp: sampler ..., split
void add_bench_command(CLI::App& app);       // bench_cmd.cpp: bench
void add_gpu_check_command(CLI::App& app);   // gpu_cmd.cpp: gpu-check
/// images_cmd.cpp: the `images` group with `images list` and `images get`; it then calls
/// add_images_make_commands(images) for the subcommands another file adds to the group.
void add_images_commands(CLI::App& app);
/// images_make_cmd.cpp: `images make`, `images export` (added to the group `images`).
/// images_cmd.cpp holds a weak empty definition, used while no other file defines it.
void add_images_make_commands(CLI::App* images);

}  // namespace loader::tool
