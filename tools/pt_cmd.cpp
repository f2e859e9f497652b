// `loader pt dump FILE` and `loader pt copy IN OUT`: inspect and re-save `.pt` files.
//
//   loader pt dump model.pt                  # JSON summary: every tensor's key, dtype, shape,
//                                            # bytes, storage id; zip records (or legacy
//                                            # storage records).  Reads no tensor data.
//   loader pt dump model.pt --max-values 10  # the object tree (golden/pt_manifest.json's
//                                            # layout): values of tensors of <= 10 elements,
//                                            # SHA-256 of every storage
//   loader pt dump model.pt --all-values --indent 2   # the tree with every value
//   loader pt copy model.pt copy.pt          # load, then save again (keeps state_dict _metadata)
//   loader pt copy old.pt new.pt --legacy-format   # write the legacy (pre-1.6) format
//
// Both read either format; copy writes the zip format unless --legacy-format.  See
// docs/pt_format.md, "Command line".
//
// Exit status 1 for a file that cannot be read or written, 2 for bad arguments.
#include <iostream>
#include <memory>
#include <optional>

#include "command.h"
#include "loader/serialization/pt.h"
#include "loader/serialization/zip.h"
#include "pt_json.h"

namespace loader::tool {

namespace {

struct DumpOptions {
  std::string path;
  int indent = -1;
  std::optional<int64_t> max_values;
  bool all_values = false;
};

int run_pt_dump(const DumpOptions& o) {
  if (o.path.empty()) throw CLI::RequiredError("FILE");
  const bool tree = o.max_values || o.all_values;
  // Mapped, so that storages nobody reads cost no memory; the summary reads no tensor
  // data at all (so it checks no CRC-32: that reads every page).
  pt::LoadOptions load;
  load.mmap = true;
  load.verify_crc = tree;
  const std::shared_ptr<pt::ByteSource> source = pt::ByteSource::map_file(o.path);
  const pt::Archive a = pt::load_archive(source, load);

  nlohmann::json out;
  out["file"] = o.path;
  out["format"] = a.format == pt::Format::Legacy ? "legacy" : "zip";
  if (tree) {
    JsonStyle style;
    style.max_values = o.all_values ? -1 : *o.max_values;
    int n_storages = 0;
    out["object"] = describe_value(a.value, &a, style, &n_storages);
    out["num_distinct_storages"] = n_storages;
  } else {
    out.update(list_tensors(a.value));
  }
  if (a.format == pt::Format::Legacy) {
    nlohmann::json records = nlohmann::json::array();
    for (const auto& r : a.legacy.records)
      records.push_back({{"key", r.key},
                         {"dtype", dtype_name(r.dtype)},
                         {"numel", r.numel},
                         {"data_offset", r.data_offset},
                         {"data_offset_mod_64", r.data_offset % 64}});
    out["legacy"] = {{"sys_info",
                      {{"protocol_version", a.legacy.protocol_version},
                       {"little_endian", a.legacy.little_endian},
                       {"type_sizes", {{"short", a.legacy.short_size}, {"int", a.legacy.int_size}, {"long", a.legacy.long_size}}}}},
                     {"records", records}};
  } else {
    pt::ZipReader zip(source);
    nlohmann::json entries = nlohmann::json::array();
    for (const auto& e : zip.entries()) {
      char crc[9];
      std::snprintf(crc, sizeof crc, "%08x", e.crc32);
      entries.push_back({{"name", e.name},
                         {"compress_type", e.method},
                         {"file_size", e.uncompressed_size},
                         {"data_offset", e.data_offset},
                         {"data_offset_mod_64", e.data_offset % 64},
                         {"crc32", crc}});
    }
    out["zip"] = {{"archive_prefix", a.archive_name}, {"entries", entries}};
  }
  std::cout << out.dump(o.indent, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  return 0;
}

struct CopyOptions {
  std::string in, out;
  bool no_byteorder = false;
  bool legacy_format = false;
  std::string archive_name;
};

int run_pt_copy(const CopyOptions& o) {
  if (o.in.empty()) throw CLI::RequiredError("IN");
  if (o.out.empty()) throw CLI::RequiredError("OUT");
  pt::SaveOptions options;
  options.write_byteorder = !o.no_byteorder;
  options.legacy_format = o.legacy_format;
  options.archive_name = o.archive_name;
  pt::Archive a = pt::load_archive(o.in);
  pt::save(a, o.out, options);
  return 0;
}

}  // namespace

void add_pt_commands(CLI::App& app) {
  CLI::App* pt = app.add_subcommand("pt", "Inspect and re-save PyTorch .pt files (both torch.save formats)");
  require_subcommand(pt);

  CLI::App* dump = pt->add_subcommand("dump", "Print what a .pt file holds as JSON");
  auto d = std::make_shared<DumpOptions>();
  // Positionals are checked by the commands, so that an unknown option is reported
  // before a missing FILE (CLI11 checks requirements first).
  dump->add_option("FILE", d->path, "the .pt file (required)");
  dump->add_option("--indent", d->indent, "JSON indentation: -1 compact (default), 0 to 16 spaces")
      ->check(kInt64)
      ->check(CLI::Range(-1, 16));
  auto* max_values = dump->add_option("--max-values", d->max_values,
                                      "print the object tree (as golden/pt_manifest.json) with the values of "
                                      "tensors of at most N elements")
                         ->check(kInt64)
                         ->check(CLI::NonNegativeNumber);
  dump->add_flag("--all-values", d->all_values, "print the object tree with the values of every tensor")
      ->excludes(max_values);
  on_run(dump, [d] { return run_pt_dump(*d); });

  CLI::App* copy = pt->add_subcommand("copy", "Load a .pt file and save it again (zip format unless --legacy-format)");
  auto c = std::make_shared<CopyOptions>();
  copy->add_option("IN", c->in, "the .pt file to read (required)");
  copy->add_option("OUT", c->out, "the .pt file to write (required)");
  copy->add_flag("--no-byteorder", c->no_byteorder, "write no `byteorder` record (as torch 1.x)");
  copy->add_option("--archive-name", c->archive_name, "record prefix (default: OUT's stem)");
  copy->add_flag("--legacy-format", c->legacy_format, "write the legacy (pre-1.6) format");
  on_run(copy, [c] { return run_pt_copy(*c); });
}

}  // namespace loader::tool
