# Install rules and the package: `cmake --install <build> --prefix <dir>` installs
#   include/loader/...                the public headers (not the runtime's private ones)
#   lib/libloader_{core,datasets,runtime}.a
#   bin/loader                        the tool
#   lib/cmake/loader/                 loaderConfig.cmake, loaderConfigVersion.cmake,
#                                     loaderTargets*.cmake, FindCAF.cmake (Debian's CAF has
#                                     no CMake config of its own)
#   lib/pkgconfig/loader.pc
# Included by the top-level CMakeLists.txt when LOADER_INSTALL is ON.
include(CMakePackageConfigHelpers)

set(LOADER_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/loader)

set(LOADER_INSTALL_TARGETS loader_core loader_datasets loader_runtime loader)
if(TARGET loader_tool)  # not built under a parent project that lacks CLI11
  list(APPEND LOADER_INSTALL_TARGETS loader_tool)
endif()
install(TARGETS ${LOADER_INSTALL_TARGETS}
  EXPORT loaderTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

# Public headers.  libloader/loader/detail/ (internal) and actors/loader/runtime/
# (the runtime's private headers, which no public header includes) stay out: of the
# runtime, only loader/dataloader.h, loader/worker_main.h, loader/shared_tensors.h, loader/serve.h
# and loader/serve_cli.h (header only, on CLI11) are public.
install(DIRECTORY ${PROJECT_SOURCE_DIR}/libloader/loader ${PROJECT_SOURCE_DIR}/datasets/loader
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
  FILES_MATCHING PATTERN "*.h" PATTERN "detail" EXCLUDE)
install(FILES ${PROJECT_SOURCE_DIR}/actors/loader/dataloader.h ${PROJECT_SOURCE_DIR}/actors/loader/worker_main.h
  ${PROJECT_SOURCE_DIR}/actors/loader/shared_tensors.h ${PROJECT_SOURCE_DIR}/actors/loader/serve.h
  ${PROJECT_SOURCE_DIR}/actors/loader/serve_cli.h
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/loader)

install(EXPORT loaderTargets NAMESPACE loader:: DESTINATION ${LOADER_CMAKE_DIR})

# What the config needs to find again in the consumer's build: the CUDA toolkit this
# was built with (a hint; CUDAToolkit_ROOT overrides it).
set(LOADER_CUDA_ROOT_HINT "")
if(LOADER_HAVE_CUDA)
  get_filename_component(LOADER_CUDA_ROOT_HINT "${CUDAToolkit_BIN_DIR}" DIRECTORY)
endif()
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/loaderConfig.cmake.in
  ${PROJECT_BINARY_DIR}/package/loaderConfig.cmake
  INSTALL_DESTINATION ${LOADER_CMAKE_DIR})
# 0.x: a new minor version may change the API.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/package/loaderConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES
  ${PROJECT_BINARY_DIR}/package/loaderConfig.cmake
  ${PROJECT_BINARY_DIR}/package/loaderConfigVersion.cmake
  ${PROJECT_SOURCE_DIR}/cmake/FindCAF.cmake
  DESTINATION ${LOADER_CMAKE_DIR})

# ---------------------------------------------------------------- loader.pc
# Static libraries: everything they need goes on the Libs line (pkg-config --libs does
# not read Libs.private without --static).  The prefix is found from the .pc file's own
# place, so `cmake --install --prefix` anywhere gives a working file.
function(loader_pc_lib out path)
  get_filename_component(name "${path}" NAME_WE)
  string(REGEX REPLACE "^lib" "" name "${name}")
  get_filename_component(dir "${path}" DIRECTORY)
  set(flags "-l${name}")
  if(NOT dir IN_LIST CMAKE_CXX_IMPLICIT_LINK_DIRECTORIES)
    set(flags "-L${dir} ${flags}")
  endif()
  set(${out} "${${out}} ${flags}" PARENT_SCOPE)
endfunction()

set(LOADER_PC_DEPS "")
if(TARGET CAF::openssl)
  loader_pc_lib(LOADER_PC_DEPS "${CAF_OPENSSL_LIBRARY}")
endif()
loader_pc_lib(LOADER_PC_DEPS "${CAF_IO_LIBRARY}")
loader_pc_lib(LOADER_PC_DEPS "${CAF_CORE_LIBRARY}")
if(LOADER_HAVE_OPENSSL)
  loader_pc_lib(LOADER_PC_DEPS "${OPENSSL_CRYPTO_LIBRARY}")
endif()
loader_pc_lib(LOADER_PC_DEPS "${JPEG_LIBRARY}")
loader_pc_lib(LOADER_PC_DEPS "${PNG_LIBRARY}")
loader_pc_lib(LOADER_PC_DEPS "${ZLIB_LIBRARY}")
if(LOADER_HAVE_CUDA)
  loader_pc_lib(LOADER_PC_DEPS "${CUDA_cudart_static_LIBRARY}")
  string(APPEND LOADER_PC_DEPS " -ldl -lrt")
endif()
string(APPEND LOADER_PC_DEPS " -pthread")
string(STRIP "${LOADER_PC_DEPS}" LOADER_PC_DEPS)

# ${pcfiledir}/.. per component of the libdir (lib/pkgconfig -> ../..).
set(LOADER_PC_PREFIX "\${pcfiledir}")
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  set(LOADER_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
  set(LOADER_PC_LIBDIR "${CMAKE_INSTALL_LIBDIR}")
else()
  string(REPLACE "/" ";" parts "${CMAKE_INSTALL_LIBDIR}/pkgconfig")
  foreach(p IN LISTS parts)
    string(APPEND LOADER_PC_PREFIX "/..")
  endforeach()
  set(LOADER_PC_LIBDIR "\${prefix}/${CMAKE_INSTALL_LIBDIR}")
endif()
configure_file(${PROJECT_SOURCE_DIR}/cmake/loader.pc.in ${PROJECT_BINARY_DIR}/package/loader.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/package/loader.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
