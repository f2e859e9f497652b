# FindCAF: locate the C++ Actor Framework as Debian's libcaf-dev installs it.
# Debian ships no CAFConfig.cmake and no pkg-config file, so we look for the
# headers and libraries ourselves and read the version from caf/config.hpp.
#
# CAF_ROOT (CMake or environment variable): a prefix with include/caf and
# lib/libcaf_{core,io}.so, such as the ThreadSanitizer-instrumented CAF that
# scripts/build_caf_tsan.sh installs.  When it is set, only that prefix is
# searched, so Debian's headers and libraries can never be mixed in.
#
# Defines CAF_FOUND, CAF_VERSION, CAF_LIBRARY_DIR and the imported targets
# CAF::core, CAF::io, and CAF::openssl when libcaf_openssl is there.
find_package(Threads REQUIRED)

if(NOT CAF_ROOT AND DEFINED ENV{CAF_ROOT})
  set(CAF_ROOT "$ENV{CAF_ROOT}")
endif()
# A build directory configured before with another root (or none) keeps the old
# results in its cache: search again.
if(NOT "${CAF_ROOT}" STREQUAL "${_CAF_SEARCHED_ROOT}")
  unset(CAF_INCLUDE_DIR CACHE)
  unset(CAF_CORE_LIBRARY CACHE)
  unset(CAF_IO_LIBRARY CACHE)
  unset(CAF_OPENSSL_LIBRARY CACHE)
endif()
set(_CAF_SEARCHED_ROOT "${CAF_ROOT}" CACHE INTERNAL "CAF_ROOT of the last CAF search")

if(CAF_ROOT)
  find_path(CAF_INCLUDE_DIR caf/all.hpp PATHS "${CAF_ROOT}/include" NO_DEFAULT_PATH)
  find_library(CAF_CORE_LIBRARY caf_core PATHS "${CAF_ROOT}/lib" "${CAF_ROOT}/lib64" NO_DEFAULT_PATH)
  find_library(CAF_IO_LIBRARY caf_io PATHS "${CAF_ROOT}/lib" "${CAF_ROOT}/lib64" NO_DEFAULT_PATH)
  find_library(CAF_OPENSSL_LIBRARY caf_openssl PATHS "${CAF_ROOT}/lib" "${CAF_ROOT}/lib64" NO_DEFAULT_PATH)
else()
  find_path(CAF_INCLUDE_DIR caf/all.hpp)
  find_library(CAF_CORE_LIBRARY caf_core)
  find_library(CAF_IO_LIBRARY caf_io)
  find_library(CAF_OPENSSL_LIBRARY caf_openssl)
endif()

if(CAF_INCLUDE_DIR AND EXISTS "${CAF_INCLUDE_DIR}/caf/config.hpp")
  file(STRINGS "${CAF_INCLUDE_DIR}/caf/config.hpp" _caf_version_line
       REGEX "^#define CAF_VERSION [0-9]+")
  string(REGEX REPLACE "^#define CAF_VERSION ([0-9]+).*" "\\1" _caf_v "${_caf_version_line}")
  if(_caf_v)
    math(EXPR _caf_major "${_caf_v} / 10000")
    math(EXPR _caf_minor "(${_caf_v} / 100) % 100")
    math(EXPR _caf_patch "${_caf_v} % 100")
    set(CAF_VERSION "${_caf_major}.${_caf_minor}.${_caf_patch}")
  endif()
endif()

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(CAF
  REQUIRED_VARS CAF_CORE_LIBRARY CAF_IO_LIBRARY CAF_INCLUDE_DIR
  VERSION_VAR CAF_VERSION)

if(CAF_FOUND)
  get_filename_component(CAF_LIBRARY_DIR "${CAF_CORE_LIBRARY}" DIRECTORY)
endif()
if(CAF_FOUND AND NOT TARGET CAF::core)
  # SHARED (not UNKNOWN) so that CMake puts CAF_LIBRARY_DIR into the RUNPATH of what
  # links it when it is not a system directory.
  add_library(CAF::core SHARED IMPORTED)
  set_target_properties(CAF::core PROPERTIES
    IMPORTED_LOCATION "${CAF_CORE_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${CAF_INCLUDE_DIR}"
    INTERFACE_LINK_LIBRARIES Threads::Threads)
  add_library(CAF::io SHARED IMPORTED)
  set_target_properties(CAF::io PROPERTIES
    IMPORTED_LOCATION "${CAF_IO_LIBRARY}"
    INTERFACE_LINK_LIBRARIES CAF::core)
  # TLS for the network layer (libcaf-openssl), optional: an instrumented CAF built
  # without it still builds the runtime, whose worker hosts then refuse --tls-*.
  if(CAF_OPENSSL_LIBRARY AND EXISTS "${CAF_INCLUDE_DIR}/caf/openssl/manager.hpp")
    add_library(CAF::openssl SHARED IMPORTED)
    set_target_properties(CAF::openssl PROPERTIES
      IMPORTED_LOCATION "${CAF_OPENSSL_LIBRARY}"
      INTERFACE_LINK_LIBRARIES CAF::io)
  endif()
endif()
mark_as_advanced(CAF_INCLUDE_DIR CAF_CORE_LIBRARY CAF_IO_LIBRARY CAF_OPENSSL_LIBRARY)
