// torch.hub.load_state_dict_from_url for local files: copies a checkpoint named by a
// `file://` URL or a local path into a cache directory once, optionally checks the
// SHA-256 prefix in its file name (`name-<sha256 prefix>.pt`, as torch.hub), and
// loads it.  There is no network access: http(s) and other schemes are refused.
//
//   loader::pt::CheckpointOptions opts;
//   opts.check_hash = true;
//   loader::Value sd = loader::pt::load_state_dict_from_url(
//       "file:///data/models/resnet18-f37072fd.pth", opts);
//
// The cache directory is CheckpointOptions::model_dir, else `$LOADER_HOME/checkpoints`
// when LOADER_HOME is set, else `${XDG_CACHE_HOME:-~/.cache}/loader/checkpoints`.
// A file already in the cache is used as is (as torch.hub: the hash is checked when
// the file is copied in, not on every load).
#pragma once

#include <string>

#include "loader/serialization/pt.h"

namespace loader::pt {

struct CheckpointOptions {
  std::string model_dir;     ///< cache directory; default checkpoint_dir()
  bool check_hash = false;   ///< verify the hash prefix in the file name when copying in
  std::string file_name;     ///< name in the cache; default the URL's last path component
  LoadOptions load;          ///< how to read the cached file
};

/// The default cache directory (see above); not created.
std::string checkpoint_dir();
/// torch.hub's HASH_REGEX `-([a-f0-9]*)\.`: the hash prefix in a file name, or "" when
/// the name has none (then nothing is checked).
std::string hash_prefix_of(const std::string& file_name);
/// The local path a `file://` URL or plain path names; ValueError for other schemes.
std::string local_path_of_url(const std::string& url);
/// Copies the checkpoint into the cache (unless there) and returns the cached path.
/// RuntimeError `invalid hash value (expected "…", got "…")` when check_hash fails
/// (nothing is left in the cache then).
std::string cache_checkpoint(const std::string& url, const CheckpointOptions& options = {});
/// cache_checkpoint, then load().
Value load_state_dict_from_url(const std::string& url, const CheckpointOptions& options = {});
/// cache_checkpoint, then load_archive() (keeps a state_dict's `_metadata`).
Archive load_archive_from_url(const std::string& url, const CheckpointOptions& options = {});

}  // namespace loader::pt
