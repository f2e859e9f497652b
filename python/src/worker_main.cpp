// loader-worker: the program the Python package's worker processes run (fork+exec: the
// interpreter cannot serve as one).  It loads the shared objects the trainer registered
// datasets from (loader.load_library appends each to LOADER_EXTENSION_LIBRARIES, a list
// separated by ':'), so their registrations run here too, then runs the worker loop.
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "loader/worker_main.h"

int main(int argc, char** argv) {
  if (const char* libs = std::getenv("LOADER_EXTENSION_LIBRARIES")) {
    std::string all(libs);
    size_t at = 0;
    while (at <= all.size()) {
      const size_t end = all.find(':', at);
      const std::string path = all.substr(at, end == std::string::npos ? std::string::npos : end - at);
      if (!path.empty() && !::dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL)) {
        std::fprintf(stderr, "loader-worker: cannot load %s (LOADER_EXTENSION_LIBRARIES): %s\n", path.c_str(), ::dlerror());
        return 3;
      }
      if (end == std::string::npos) break;
      at = end + 1;
    }
  }
  if (auto rc = loader::runtime::run_worker_if_requested(argc, argv)) return *rc;
  std::fprintf(stderr,
               "loader-worker: this program runs the Python package's worker processes; the package starts it, "
               "not you\n");
  return 2;
}
