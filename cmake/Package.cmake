# ranksim as a library for other projects (docs/library.md): the names users link, the install
# rules, the CMake package, the pkg-config file and the Debian package (CPack).
#
# Users link ranksim::<part>: the same names in-tree (ALIAS targets, for add_subdirectory and
# FetchContent) and installed (find_package(ranksim CONFIG)). The parts:
#   ranksim::sim  ranksim::device  ranksim::tensor  ranksim::distributed  ranksim::runtime (the
#   three runtime libraries)  ranksim::tp  ranksim::cp  ranksim::models  ranksim::ranksim (all of
#   them)  ranksim::testing (GoogleTest helpers; when built)  ranksim::cuda, ranksim::gpu (the
#   CUDA device and the GPU backend; only in a build with RANKSIM_WITH_CUDA).
# The command `ranksim` is installed but not exported.

add_library(ranksim_all INTERFACE)
target_link_libraries(ranksim_all INTERFACE ranksim_models ranksim_tp ranksim_cp ranksim_runtime ranksim_sim)

set(ranksim_exported ranksim_sim ranksim_device ranksim_tensor ranksim_distributed ranksim_runtime ranksim_tp
    ranksim_cp ranksim_models ranksim_all)
if(RANKSIM_WITH_CUDA)
  list(APPEND ranksim_exported ranksim_cuda ranksim_gpu)
endif()
if(TARGET ranksim_testing)
  list(APPEND ranksim_exported ranksim_testing)
endif()
foreach(target ${ranksim_exported})
  if(target STREQUAL "ranksim_all")
    set(part ranksim)
  else()
    string(REGEX REPLACE "^ranksim_" "" part ${target})
  endif()
  set_target_properties(${target} PROPERTIES EXPORT_NAME ${part})
  add_library(ranksim::${part} ALIAS ${target})
endforeach()

# Headers: include/ranksim/<folder>/..., only those of the parts built.
set(ranksim_header_excludes "")
if(NOT RANKSIM_WITH_CUDA)
  list(APPEND ranksim_header_excludes PATTERN "cuda" EXCLUDE PATTERN "nccl" EXCLUDE PATTERN "*.cuh" EXCLUDE)
endif()
foreach(folder sim runtime tp cp models)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${folder} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/ranksim
          COMPONENT dev FILES_MATCHING PATTERN "*.h" PATTERN "*.cuh" ${ranksim_header_excludes})
endforeach()
if(TARGET ranksim_testing)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/testing DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/ranksim
          COMPONENT dev FILES_MATCHING PATTERN "*.h")
endif()

# (The include directories come from ranksim_public_includes, cmake/Warnings.cmake.)
install(TARGETS ${ranksim_exported} EXPORT ranksimTargets ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev)
install(TARGETS ranksim RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT bin)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/topologies ${PROJECT_SOURCE_DIR}/scenarios
        DESTINATION ${CMAKE_INSTALL_DATADIR}/ranksim COMPONENT bin)
install(FILES ${PROJECT_SOURCE_DIR}/LICENSE ${PROJECT_SOURCE_DIR}/CHANGELOG.md ${PROJECT_SOURCE_DIR}/README.md
        DESTINATION ${CMAKE_INSTALL_DOCDIR} COMPONENT bin)

# The CMake package: lib/cmake/ranksim/ranksim{Config,ConfigVersion,Targets}.cmake.
include(CMakePackageConfigHelpers)
set(RANKSIM_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/ranksim)
set(RANKSIM_PACKAGE_WITH_MPI ${RANKSIM_WITH_MPI})
set(RANKSIM_PACKAGE_WITH_CUDA ${RANKSIM_WITH_CUDA})
if(TARGET ranksim_testing)
  set(RANKSIM_PACKAGE_WITH_TESTING ON)
else()
  set(RANKSIM_PACKAGE_WITH_TESTING OFF)
endif()
install(EXPORT ranksimTargets NAMESPACE ranksim:: DESTINATION ${RANKSIM_CMAKE_DIR} COMPONENT dev)
# ranksim_DATA_DIR: where the shipped topologies/ and scenarios/ are (the installed share/ranksim;
# in-tree, the checkout).
set(RANKSIM_DATA_INSTALL_DIR ${CMAKE_INSTALL_DATADIR}/ranksim)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/ranksimConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/package/ranksimConfig.cmake INSTALL_DESTINATION ${RANKSIM_CMAKE_DIR}
                              PATH_VARS RANKSIM_DATA_INSTALL_DIR)
set(ranksim_DATA_DIR ${PROJECT_SOURCE_DIR} CACHE INTERNAL "ranksim's shipped topologies/ and scenarios/")
# 0.x: a minor version may break the API, so only the same minor version is compatible.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/package/ranksimConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/package/ranksimConfig.cmake ${PROJECT_BINARY_DIR}/package/ranksimConfigVersion.cmake
        DESTINATION ${RANKSIM_CMAKE_DIR} COMPONENT dev)

# pkg-config (lib/pkgconfig/ranksim.pc): the libraries in link order and what they need. Boost
# has no .pc file, so Boost.Context is named by its library.
set(RANKSIM_PC_LIBS "-lranksim_models -lranksim_tp -lranksim_cp")
set(RANKSIM_PC_REQUIRES "eigen3 yaml-cpp")
set(RANKSIM_PC_CFLAGS "")
set(RANKSIM_PC_EXTRA "")
if(RANKSIM_WITH_CUDA)
  # The GPU backend and the CUDA device are linked whenever they are built: tp, cp and models
  # hold kernels registered with the CUDA device. The toolkit is not a pkg-config package.
  get_filename_component(ranksim_nccl_dir ${RANKSIM_NCCL_LIBRARY} DIRECTORY)
  string(APPEND RANKSIM_PC_LIBS " -lranksim_gpu -lranksim_distributed -lranksim_tensor -lranksim_cuda")
  list(REMOVE_DUPLICATES CUDAToolkit_INCLUDE_DIRS)
  set(ranksim_pc_dirs ${CUDAToolkit_LIBRARY_DIR} ${ranksim_nccl_dir})
  list(REMOVE_DUPLICATES ranksim_pc_dirs)
  list(TRANSFORM ranksim_pc_dirs PREPEND "-L")
  string(REPLACE ";" " " ranksim_pc_dirs "${ranksim_pc_dirs}")
  set(RANKSIM_PC_EXTRA " ${ranksim_pc_dirs} -lnccl -lcublas -lcudart")
  set(ranksim_pc_includes ${CUDAToolkit_INCLUDE_DIRS} ${RANKSIM_NCCL_INCLUDE_DIR})
  list(REMOVE_DUPLICATES ranksim_pc_includes)
  list(TRANSFORM ranksim_pc_includes PREPEND "-I")
  string(REPLACE ";" " " ranksim_pc_includes "${ranksim_pc_includes}")
  set(RANKSIM_PC_CFLAGS " ${ranksim_pc_includes}")
else()
  string(APPEND RANKSIM_PC_LIBS " -lranksim_distributed -lranksim_tensor")
endif()
string(APPEND RANKSIM_PC_LIBS " -lranksim_device -lranksim_sim${RANKSIM_PC_EXTRA} -lboost_context")
if(RANKSIM_WITH_MPI)
  string(APPEND RANKSIM_PC_REQUIRES " ompi-cxx")
endif()
# The prefix relative to the .pc file's folder, so that the installed tree can move.
string(REGEX REPLACE "[^/]+" ".." RANKSIM_PC_UP "${CMAKE_INSTALL_LIBDIR}/pkgconfig")
configure_file(${PROJECT_SOURCE_DIR}/cmake/ranksim.pc.in ${PROJECT_BINARY_DIR}/package/ranksim.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/package/ranksim.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT dev)

# The Debian package (cpack -G DEB in the build folder): the command, the headers, the libraries
# and the CMake package, depending on the Debian packages ranksim is built from.
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME ranksim)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_VENDOR "ranksim")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "Deterministic simulator of multi-rank torch.distributed-style programs")
set(CPACK_PACKAGE_CONTACT "ranksim maintainers <ranksim@localhost>")
set(CPACK_RESOURCE_FILE_LICENSE ${PROJECT_SOURCE_DIR}/LICENSE)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION devel)
set(CPACK_DEBIAN_PACKAGE_LICENSE Apache-2.0)
# The -dev packages bring the shared libraries the command links and the headers and CMake
# files the installed package finds (find_dependency in ranksimConfig.cmake).
set(ranksim_deb_depends libboost-context-dev libeigen3-dev libyaml-cpp-dev)
if(TARGET ranksim_testing)
  list(APPEND ranksim_deb_depends libgtest-dev)
endif()
if(RANKSIM_WITH_MPI)
  list(APPEND ranksim_deb_depends libopenmpi-dev)
endif()
string(REPLACE ";" ", " CPACK_DEBIAN_PACKAGE_DEPENDS "${ranksim_deb_depends}")
if(RANKSIM_WITH_CUDA)
  # CUDA and NCCL come from NVIDIA, not from Debian: a package built with the GPU backend says
  # so in its description instead of depending on packages apt cannot resolve.
  string(APPEND CPACK_PACKAGE_DESCRIPTION_SUMMARY " (GPU backend: needs CUDA ${CUDAToolkit_VERSION} and NCCL)")
endif()
include(CPack)
