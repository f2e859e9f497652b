// `loader pt dump FILE` and `loader pt copy IN OUT`: inspect and re-save `.pt` files.
//
//   loader pt dump model.pt --indent 2     # JSON: zip records (or legacy storage records),
//                                          # object tree, tensor values
//   loader pt copy model.pt copy.pt        # load, then save again (keeps state_dict _metadata)
//   loader pt copy old.pt new.pt --legacy-format   # write the legacy (pre-1.6) format
//
// Both read either format; copy writes the zip format unless --legacy-format.
//
// Exit status 1 for a file that cannot be read or written, 2 for bad arguments.
#include <iostream>

#include "command.h"
#include "loader/serialization/pt.h"
#include "loader/serialization/zip.h"
#include "pt_json.h"

namespace loader::tool {

namespace {

int run_pt_dump(Args& args) {
  JsonStyle style;
  style.max_values = args.get_int("max-values", -1);
  const int64_t indent = args.get_int("indent", -1);
  args.finish();
  if (args.positional.size() != 1) throw UsageError("expected exactly one FILE, got " + std::to_string(args.positional.size()));
  if (indent < -1 || indent > 16) throw UsageError("--indent must be between -1 (compact) and 16");
  const std::string& path = args.positional[0];

  pt::Archive a = pt::load_archive(path);
  nlohmann::json out;
  out["file"] = path;
  int n_storages = 0;
  out["object"] = describe_value(a.value, &a, style, &n_storages);
  out["num_distinct_storages"] = n_storages;
  if (a.format == pt::Format::Legacy) {
    out["format"] = "legacy";
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
    std::cout << out.dump(static_cast<int>(indent), ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    return 0;
  }
  out["format"] = "zip";
  pt::ZipReader zip(pt::ByteSource::from_file(path));
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
  std::cout << out.dump(static_cast<int>(indent), ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  return 0;
}

int run_pt_copy(Args& args) {
  pt::SaveOptions options;
  options.write_byteorder = !args.flag("no-byteorder");
  options.legacy_format = args.flag("legacy-format");
  if (auto name = args.get("archive-name")) options.archive_name = *name;
  args.finish();
  if (args.positional.size() != 2) throw UsageError("expected IN and OUT, got " + std::to_string(args.positional.size()) + " paths");
  pt::Archive a = pt::load_archive(args.positional[0]);
  pt::save(a, args.positional[1], options);
  return 0;
}

}  // namespace

LOADER_TOOL_COMMAND("pt dump", "pt dump FILE [--indent N] [--max-values N]", {}, run_pt_dump);
#define LOADER_PT_COPY_FLAGS {"no-byteorder", "legacy-format"}
LOADER_TOOL_COMMAND("pt copy", "pt copy IN OUT [--no-byteorder] [--archive-name NAME] [--legacy-format]",
                    LOADER_PT_COPY_FLAGS, run_pt_copy);
#undef LOADER_PT_COPY_FLAGS

}  // namespace loader::tool
