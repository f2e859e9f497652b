# FindTurboJPEG: libjpeg-turbo's TurboJPEG API (Debian: libturbojpeg0-dev), which the
# `loader` tool's JPEG encoder (tools/images_make_cmd.cpp, `images make`) and
# bench/jpeg_decode_probe use; the decoder (datasets/loader/image/decode.cpp) uses the
# libjpeg API (CMake's FindJPEG).
#
# libjpeg-turbo's own CMake config names its static libraries too, which Debian does not
# ship, so the header and the shared library are found here.
#
# Defines TurboJPEG_FOUND, TurboJPEG_INCLUDE_DIR, TurboJPEG_LIBRARY and the imported
# target TurboJPEG::TurboJPEG.
find_path(TurboJPEG_INCLUDE_DIR turbojpeg.h)
find_library(TurboJPEG_LIBRARY NAMES turbojpeg)

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(TurboJPEG
  REQUIRED_VARS TurboJPEG_LIBRARY TurboJPEG_INCLUDE_DIR
  REASON_FAILURE_MESSAGE "install libjpeg-turbo's TurboJPEG API (Debian: apt-get install libturbojpeg0-dev)")

if(TurboJPEG_FOUND AND NOT TARGET TurboJPEG::TurboJPEG)
  add_library(TurboJPEG::TurboJPEG UNKNOWN IMPORTED)
  set_target_properties(TurboJPEG::TurboJPEG PROPERTIES
    IMPORTED_LOCATION "${TurboJPEG_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${TurboJPEG_INCLUDE_DIR}")
endif()
mark_as_advanced(TurboJPEG_INCLUDE_DIR TurboJPEG_LIBRARY)
