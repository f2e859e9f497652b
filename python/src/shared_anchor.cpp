// libloader.so: the loader's three static libraries linked whole into one shared object
// (python/CMakeLists.txt).  This unit only gives the object a source of its own and a
// symbol naming the build, for `nm -D libloader.so | grep loader_shared_build`.
extern "C" __attribute__((visibility("default"))) const char* loader_shared_build() { return "loader " LOADER_SHARED_VERSION; }
