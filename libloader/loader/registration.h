// What the registration macros share (LOADER_REGISTER_DATASET in dataset.h,
// LOADER_REGISTER_COLLATE_FN in collate.h, LOADER_REGISTER_WORKER_INIT_FN in
// worker_info.h): a unique name for the static registrar object, and the hint that
// every "unknown name" error gives.  Each of those headers includes this one, so a
// macro compiles with only its own header included.
//
// A registration macro is a static object whose constructor registers the name when
// the program starts.  In the program's own source files that always runs.  In a
// static library (.a) it runs only if the linker keeps that object file, which it
// does only when the program refers to something else in the same file; otherwise
// the registration is dropped without a word, and the name is unknown at run time.
// Keep such registrations by linking the library whole:
//
//   target_link_libraries(app PRIVATE "$<LINK_LIBRARY:WHOLE_ARCHIVE,my_datasets>")  # CMake >= 3.24
//   g++ main.o -Wl,--whole-archive -lmy_datasets -Wl,--no-whole-archive ...          # by hand
//
// or by calling, from main(), a function of the library that registers its names
// (loader::register_dataset and friends).  loader's own built-in datasets need
// none of this: the registry adds them on first use.
#pragma once

#include <string>

#define LOADER_CONCAT_INNER(a, b) a##b
#define LOADER_CONCAT(a, b) LOADER_CONCAT_INNER(a, b)
/// A name unique within the translation unit, for a registrar object.
#define LOADER_UNIQUE_NAME(prefix) LOADER_CONCAT(prefix, __COUNTER__)

namespace loader::detail {

/// The end of every "unknown <what>" message: how to register `what` with `macro`, and
/// what to do when the registration sits in a static library that the linker dropped.
std::string registration_hint(const std::string& macro, const std::string& function);

}  // namespace loader::detail
