#include "loader/image/image_folder.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>

#include "loader/error.h"
#include "loader/generator.h"

namespace loader::image {

namespace {

// os.path.join(a, b) for a relative b.
std::string join(const std::string& a, const std::string& b) {
  if (a.empty() || a.back() == '/') return a + b;
  return a + "/" + b;
}

// os.path.expanduser for "~" and "~/...".
std::string expand_user(const std::string& p) {
  if (p.empty() || p[0] != '~' || (p.size() > 1 && p[1] != '/')) return p;
  const char* home = std::getenv("HOME");
  if (!home || !*home) return p;
  std::string h = home;
  if (p.size() > 1 && !h.empty() && h.back() == '/') h.pop_back();
  return h + p.substr(1);
}

std::string errno_text(int e, const std::string& path) {
  return "[Errno " + std::to_string(e) + "] " + std::strerror(e) + ": '" + path + "'";
}

// Owner of an open directory stream.
class Dir {
 public:
  explicit Dir(const std::string& path) : d_(::opendir(path.c_str())), errno_(d_ ? 0 : errno) {}
  ~Dir() {
    if (d_) ::closedir(d_);
  }
  Dir(const Dir&) = delete;
  Dir& operator=(const Dir&) = delete;
  DIR* get() const noexcept { return d_; }
  int error() const noexcept { return errno_; }

 private:
  DIR* d_;
  int errno_;
};

struct Entry {
  std::string name;
  bool is_dir;
};

// os.scandir: the entries of `path` but "." and "..", with DirEntry.is_dir() (symbolic
// links followed; false when the target cannot be stat'ed).  Returns false (errno in
// *error) when the directory cannot be opened.
bool scan(const std::string& path, std::vector<Entry>* out, int* error) {
  Dir dir(path);
  if (!dir.get()) {
    *error = dir.error();
    return false;
  }
  while (true) {
    errno = 0;
    const dirent* e = ::readdir(dir.get());
    if (!e) break;
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    bool is_dir = false;
    if (e->d_type == DT_DIR) {
      is_dir = true;
    } else if (e->d_type == DT_LNK || e->d_type == DT_UNKNOWN) {
      struct stat st {};
      is_dir = ::stat(join(path, name).c_str(), &st) == 0 && S_ISDIR(st.st_mode);
    }
    out->push_back({name, is_dir});
  }
  return true;
}

bool is_directory(const std::string& path, struct stat* st) {
  return ::stat(path.c_str(), st) == 0 && S_ISDIR(st->st_mode);
}

struct DirFiles {
  std::string root;
  std::vector<std::string> files;
};

// os.walk(top, followlinks=True), top-down; directories that cannot be listed are skipped
// (os.walk's onerror=None).  `ancestors` holds (device, inode) of the directories being
// walked, so a symbolic link back to one of them is not entered.
void walk(const std::string& top, std::set<std::pair<dev_t, ino_t>>& ancestors, std::vector<DirFiles>& out) {
  struct stat st {};
  if (!is_directory(top, &st)) return;
  const auto key = std::make_pair(st.st_dev, st.st_ino);
  if (!ancestors.insert(key).second) return;
  std::vector<Entry> entries;
  int error = 0;
  if (scan(top, &entries, &error)) {
    DirFiles d{top, {}};
    std::vector<std::string> dirs;
    for (auto& e : entries) {
      if (e.is_dir)
        dirs.push_back(e.name);
      else
        d.files.push_back(e.name);
    }
    out.push_back(std::move(d));
    for (const auto& name : dirs) walk(join(top, name), ancestors, out);
  }
  ancestors.erase(key);
}

std::string join_names(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

[[noreturn]] void rethrow_prefixed(const Error& e, const std::string& prefix) {
  if (e.python_type() == "FileNotFoundError") throw FileNotFoundError(prefix + e.what());
  throw_error(e.python_type(), prefix + e.what());
}

}  // namespace

// ------------------------------------------------------------------ torchvision's folder.py
const std::vector<std::string>& img_extensions() {
  static const std::vector<std::string> ext = {".jpg", ".jpeg", ".png", ".ppm", ".bmp",
                                               ".pgm", ".tif",  ".tiff", ".webp"};
  return ext;
}

bool has_file_allowed_extension(const std::string& filename, const std::vector<std::string>& extensions) {
  for (const auto& ext : extensions) {
    if (ext.size() > filename.size()) continue;
    bool match = true;
    const size_t off = filename.size() - ext.size();
    for (size_t i = 0; i < ext.size() && match; ++i) {
      char c = filename[off + i];
      if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
      match = c == ext[i];
    }
    if (match) return true;
  }
  return false;
}

std::vector<std::string> find_classes(const std::string& directory) {
  std::vector<Entry> entries;
  int error = 0;
  if (!scan(directory, &entries, &error)) {
    if (error == ENOENT) throw FileNotFoundError(errno_text(error, directory));
    throw RuntimeError(errno_text(error, directory) + " (cannot list the dataset's root directory)");
  }
  std::vector<std::string> classes;
  for (const auto& e : entries)
    if (e.is_dir) classes.push_back(e.name);
  std::sort(classes.begin(), classes.end());
  if (classes.empty()) throw FileNotFoundError("Couldn't find any class folder in " + directory + ".");
  return classes;
}

std::vector<Sample> make_dataset(const std::string& directory_in, const std::map<std::string, int64_t>& class_to_idx,
                                 const std::optional<std::vector<std::string>>& extensions,
                                 const std::function<bool(const std::string&)>& is_valid_file) {
  const std::string directory = expand_user(directory_in);
  if (class_to_idx.empty())
    throw ValueError("'class_to_index' must have at least one entry to collect any samples.");
  if (extensions.has_value() == static_cast<bool>(is_valid_file))
    throw ValueError("Both extensions and is_valid_file cannot be None or not None at the same time");
  std::vector<Sample> instances;
  std::vector<std::string> empty;
  for (const auto& [target_class, class_index] : class_to_idx) {  // std::map: sorted keys
    const std::string target_dir = join(directory, target_class);
    struct stat st {};
    bool found = false;
    if (is_directory(target_dir, &st)) {
      std::vector<DirFiles> walked;
      std::set<std::pair<dev_t, ino_t>> ancestors;
      walk(target_dir, ancestors, walked);
      std::sort(walked.begin(), walked.end(), [](const DirFiles& a, const DirFiles& b) { return a.root < b.root; });
      for (auto& d : walked) {
        std::sort(d.files.begin(), d.files.end());
        for (const auto& fname : d.files) {
          std::string path = join(d.root, fname);
          const bool ok = extensions ? has_file_allowed_extension(path, *extensions) : is_valid_file(path);
          if (ok) {
            instances.push_back({std::move(path), class_index});
            found = true;
          }
        }
      }
    }
    if (!found) empty.push_back(target_class);
  }
  if (!empty.empty()) {
    std::string msg = "Found no valid file for the classes " + join_names(empty) + ". ";
    if (extensions) msg += "Supported extensions are: " + join_names(*extensions);
    throw FileNotFoundError(msg);
  }
  return instances;
}

// ------------------------------------------------------------------ ImageDataset
ImageDataset::ImageDataset(std::string kind, ImageDatasetOptions options)
    : kind_(std::move(kind)), options_(std::move(options)) {
  load_.decode.mode = options_.mode;
  load_.decode.max_image_pixels = options_.max_image_pixels;
  load_.decode_scaling = options_.decode_scaling;
  const auto& steps = options_.transform.steps();
  for (size_t i = 0; i < steps.size(); ++i)
    if (options_.mode == ColorMode::L && steps[i].kind == TransformStep::Kind::Normalize &&
        (steps[i].mean.size() == 3 || steps[i].std_dev.size() == 3))
      throw ValueError(kind_ + ": mode L gives 1 channel, and Normalize (step " + std::to_string(i) +
                       ") has 3 mean/std values; give one value each, or use mode RGB (the train and eval "
                       "presets normalise RGB with ImageNet's values)");
}

int64_t ImageDataset::check_index(int64_t index) const {
  const int64_t n = size();
  const int64_t i = index < 0 ? index + n : index;
  if (i < 0 || i >= n)
    throw IndexError(kind_ + ": index " + std::to_string(index) + " is out of range for " + std::to_string(n) +
                     " samples");
  return i;
}

std::string ImageDataset::sample_name(int64_t i) const {
  return kind_ + ": sample " + std::to_string(i) + " (" + samples_[static_cast<size_t>(i)].path + ")";
}

std::vector<int64_t> ImageDataset::targets() const {
  std::vector<int64_t> t;
  t.reserve(samples_.size());
  for (const auto& s : samples_) t.push_back(s.target);
  return t;
}

namespace {
std::string read_sample(const std::string& kind, int64_t i, const std::string& path) {
  try {
    return read_file(path);
  } catch (const Error& e) {
    rethrow_prefixed(e, kind + ": sample " + std::to_string(i) + ": ");
  }
}
}  // namespace

Tensor ImageDataset::image(int64_t index, Trace* trace) {
  const int64_t i = check_index(index);
  const Sample& s = samples_[static_cast<size_t>(i)];
  const std::string bytes = read_sample(kind_, i, s.path);
  return options_.transform.load(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), load_,
                                 default_generator(), sample_name(i), trace);
}

Value ImageDataset::get(int64_t index) {
  const int64_t i = check_index(index);
  Tensor img = image(i);
  const int64_t target = samples_[static_cast<size_t>(i)].target;
  Value t = options_.target_transform ? options_.target_transform(target) : Value(target);
  return Value::tuple({Value(std::move(img)), std::move(t)});
}

std::optional<Value> ImageDataset::sample_spec() const {
  if (options_.target_transform) return std::nullopt;
  const auto shape = options_.transform.fixed_output_shape(mode_channels(options_.mode));
  if (!shape) return std::nullopt;
  return Value::tuple({Value(Tensor::empty(*shape, options_.transform.output_dtype())),
                       Value(Tensor::scalar(int64_t{0}))});
}

void ImageDataset::get_into(int64_t index, void* const* leaves) {
  const int64_t i = check_index(index);
  const auto shape = options_.transform.fixed_output_shape(mode_channels(options_.mode));
  if (!shape || options_.target_transform)
    throw NotImplementedError(kind_ + ": get_into() needs a pipeline with a fixed output size and no "
                                      "target_transform (sample_spec() is None)");
  const Sample& s = samples_[static_cast<size_t>(i)];
  const std::string bytes = read_sample(kind_, i, s.path);
  options_.transform.load_into(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), load_,
                               default_generator(), sample_name(i), leaves[0], *shape);
  const int64_t target = s.target;
  std::memcpy(leaves[1], &target, sizeof target);
}

// ------------------------------------------------------------------ ImageFolder
namespace {

Value handle_params(const ImageDatasetOptions& o) {
  return Value::dict({{"transform", o.transform.to_value()},
                      {"mode", mode_name(o.mode)},
                      {"decode_scaling", o.decode_scaling},
                      {"max_image_pixels", o.max_image_pixels}});
}

Value string_list(const std::vector<std::string>& v) {
  std::vector<Value> items;
  for (const auto& s : v) items.emplace_back(s);
  return Value::list(std::move(items));
}

}  // namespace

ImageFolder::ImageFolder(std::string root, ImageDatasetOptions options,
                         std::optional<std::vector<std::string>> extensions,
                         std::function<bool(const std::string&)> is_valid_file)
    : ImageDataset("ImageFolder", std::move(options)), root_(expand_user(root)) {
  if (!extensions && !is_valid_file) extensions = img_extensions();
  classes_ = find_classes(root_);
  for (size_t i = 0; i < classes_.size(); ++i) class_to_idx_[classes_[i]] = static_cast<int64_t>(i);
  set_samples(make_dataset(root_, class_to_idx_, extensions, is_valid_file));
  if (!is_valid_file && !this->options().target_transform) {
    Value p = handle_params(this->options());
    p.set(Value("root"), Value(root_));
    p.set(Value("extensions"), string_list(*extensions));
    set_handle({"image_folder", p});
  }
}

// ------------------------------------------------------------------ ImageList
namespace {

std::string trim(const std::string& s) {
  size_t a = 0, b = s.size();
  while (a < b && (s[a] == ' ' || s[a] == '\t' || s[a] == '\r')) ++a;
  while (b > a && (s[b - 1] == ' ' || s[b - 1] == '\t' || s[b - 1] == '\r')) --b;
  return s.substr(a, b - a);
}

bool parse_label(const std::string& text, int64_t* out) {
  if (text.empty()) return false;
  int64_t v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
    if (v > (INT64_MAX - 9) / 10) return false;
    v = v * 10 + (c - '0');
  }
  *out = v;
  return true;
}

std::string directory_of(const std::string& path) {
  const auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

}  // namespace

ImageList::ImageList(std::string list_file, ImageDatasetOptions options, std::string root)
    : ImageDataset("ImageList", std::move(options)), list_file_(expand_user(list_file)) {
  std::ifstream in(list_file_, std::ios::binary);
  if (!in) {
    struct stat st {};
    if (::stat(list_file_.c_str(), &st) != 0 && errno == ENOENT)
      throw FileNotFoundError("ImageList: the list file " + list_file_ + " does not exist");
    throw RuntimeError("ImageList: cannot read the list file " + list_file_);
  }
  const std::string base = root.empty() ? directory_of(list_file_) : expand_user(root);
  std::vector<Sample> samples;
  std::string line;
  int64_t lineno = 0;
  auto bad = [&](const std::string& why) {
    return ValueError("ImageList: " + list_file_ + " line " + std::to_string(lineno) + ": " + why +
                      "; each line must be `path,label` (or `path label`), the label an integer >= 0");
  };
  while (std::getline(in, line)) {
    ++lineno;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const std::string t = trim(line);
    if (t.empty() || t[0] == '#') continue;
    std::string path, label_text;
    if (t[0] == '"') {
      // A quoted path: "" is a quote; then a comma (or blanks) and the label.
      size_t i = 1;
      bool closed = false;
      for (; i < t.size(); ++i) {
        if (t[i] == '"') {
          if (i + 1 < t.size() && t[i + 1] == '"') {
            path += '"';
            ++i;
          } else {
            closed = true;
            ++i;
            break;
          }
        } else {
          path += t[i];
        }
      }
      if (!closed) throw bad("the quoted path has no closing quote");
      std::string rest = trim(t.substr(i));
      if (!rest.empty() && rest[0] == ',') rest = trim(rest.substr(1));
      label_text = rest;
    } else {
      const size_t comma = t.rfind(',');
      if (comma != std::string::npos) {
        path = trim(t.substr(0, comma));
        label_text = trim(t.substr(comma + 1));
      } else {
        const size_t blank = t.find_last_of(" \t");
        if (blank == std::string::npos) throw bad("no label");
        path = trim(t.substr(0, blank));
        label_text = trim(t.substr(blank + 1));
      }
    }
    if (samples.empty() && path == "path" && label_text == "label") continue;  // a CSV header
    int64_t label = 0;
    if (!parse_label(label_text, &label)) throw bad("the label '" + label_text + "' is not an integer >= 0");
    if (path.empty()) throw bad("empty path");
    samples.push_back({path[0] == '/' ? path : join(base, path), label});
  }
  if (in.bad()) throw RuntimeError("ImageList: error reading the list file " + list_file_);
  set_samples(std::move(samples));
  if (!this->options().target_transform) {
    Value p = handle_params(this->options());
    p.set(Value("list"), Value(list_file_));
    if (!root.empty()) p.set(Value("root"), Value(base));
    set_handle({"image_list", p});
  }
}

// ------------------------------------------------------------------ registration
ImageDatasetOptions image_dataset_options(const Value& params, const std::string& type) {
  ImageDatasetOptions o;
  if (!params.is_dict()) return o;
  try {
    int64_t size = 224;
    const Value sz = params.get("size", Value());
    if (!sz.is_none()) size = sz.to_int();
    o.transform = Compose::from_value(params.get("transform", Value("none")), size);
    const Value mode = params.get("mode", Value());
    if (!mode.is_none()) o.mode = parse_mode(mode.to_string(), type + " mode");
    const Value ds = params.get("decode_scaling", Value());
    if (!ds.is_none()) o.decode_scaling = ds.to_bool();
    if (params.contains("max_image_pixels")) {
      const Value m = params.at("max_image_pixels");
      o.max_image_pixels = m.is_none() ? 0 : m.to_int();
    }
  } catch (const Error& e) {
    rethrow_prefixed(e, type + ": ");
  }
  return o;
}

namespace {

void check_keys(const Value& params, const std::string& type, const std::vector<std::string>& accepted) {
  if (!params.is_dict()) throw TypeError(type + " parameters must be a dict, got " + params.python_type());
  for (const auto& [key, v] : params.dict_items()) {
    (void)v;
    const std::string k = key.is_string() ? key.to_string() : key.repr();
    if (std::find(accepted.begin(), accepted.end(), k) == accepted.end())
      throw ValueError("unknown parameter '" + k + "' for " + type + "; accepted: " + join_names(accepted));
  }
}

std::shared_ptr<Dataset> make_image_folder(const Value& p) {
  check_keys(p, "image_folder", {"root", "transform", "size", "mode", "decode_scaling", "max_image_pixels", "extensions"});
  if (!p.contains("root") || !p.at("root").is_string())
    throw ValueError("image_folder needs \"root\": the directory holding one directory per class");
  std::optional<std::vector<std::string>> ext;
  if (p.contains("extensions") && !p.at("extensions").is_none()) {
    const Value& e = p.at("extensions");
    std::vector<std::string> list;
    if (e.is_string()) {
      list.push_back(e.to_string());
    } else if (e.is_sequence()) {
      for (const Value& x : e.items()) list.push_back(x.to_string());
    } else {
      throw TypeError("image_folder extensions must be a list of strings, got " + e.python_type());
    }
    ext = std::move(list);
  }
  return std::make_shared<ImageFolder>(p.at("root").to_string(), image_dataset_options(p, "image_folder"), ext);
}

std::shared_ptr<Dataset> make_image_list(const Value& p) {
  check_keys(p, "image_list", {"list", "root", "transform", "size", "mode", "decode_scaling", "max_image_pixels"});
  if (!p.contains("list") || !p.at("list").is_string())
    throw ValueError("image_list needs \"list\": the text file of `path,label` lines");
  const Value root = p.get("root", Value());
  return std::make_shared<ImageList>(p.at("list").to_string(), image_dataset_options(p, "image_list"),
                                     root.is_none() ? std::string() : root.to_string());
}

}  // namespace

void register_image_datasets() {
  if (!is_registered_dataset("image_folder")) register_dataset("image_folder", make_image_folder);
  if (!is_registered_dataset("image_list")) register_dataset("image_list", make_image_list);
}

}  // namespace loader::image
