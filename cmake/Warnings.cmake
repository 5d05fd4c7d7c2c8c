# -Wnull-dereference is left out: GCC 12 at -O3 reports it inside libstdc++'s own string and
# vector code (false positives that no source change can silence). -Wrestrict is turned off for
# the same reason: GCC 12 flags `"literal" + std::string(...)` inside libstdc++ (GCC bug 105651);
# it is given to GCC only (clang has no such warning and would reject the flag under -Werror).
#
# Compile flags shared by every ranksim target, applied through the interface target
# ranksim_flags. Floating-point contraction is off so that results do not depend on whether the
# compiler fuses a multiply-add: the same program gives the same bits on every x86-64 machine.
add_library(ranksim_flags INTERFACE)
# The flags are for C++ sources only: CUDA sources (the GPU backend) get nvcc's own defaults.
target_compile_options(ranksim_flags INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wold-style-cast
  -Wcast-align -Woverloaded-virtual -Wimplicit-fallthrough -ffp-contract=off>
  $<$<COMPILE_LANG_AND_ID:CXX,GNU>:-Wno-restrict>)
# __FILE__ (RANKSIM_CHECK's messages) names sources relative to the repository root, so that the
# installed libraries hold no path of the machine that built them (scripts/package_check.sh).
target_compile_options(ranksim_flags INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-fmacro-prefix-map=${PROJECT_SOURCE_DIR}/=>)
# RANKSIM_NATIVE adds -march=native. The vector width and instruction choice change, the values
# do not: contraction stays off, so no multiply-add is fused (FMA instructions appear only where
# code asks for them explicitly, as Eigen's own GEMM does), and runtime::matmul keeps its fixed
# per-element order (runtime/tensor/ops.h). `benches/tp_bench --digest` compares two builds' bits.
if(RANKSIM_NATIVE)
  include(CheckCXXCompilerFlag)
  check_cxx_compiler_flag(-march=native RANKSIM_COMPILER_HAS_MARCH_NATIVE)
  if(RANKSIM_COMPILER_HAS_MARCH_NATIVE)
    target_compile_options(ranksim_flags INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-march=native>)
  else()
    message(WARNING "RANKSIM_NATIVE: ${CMAKE_CXX_COMPILER_ID} does not accept -march=native; "
                    "building for the default instruction set")
  endif()
endif()
if(RANKSIM_WERROR)
  target_compile_options(ranksim_flags INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-Werror>)
endif()
if(RANKSIM_SANITIZE)
  target_compile_options(ranksim_flags INTERFACE
    -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  target_link_options(ranksim_flags INTERFACE -fsanitize=address,undefined)
  target_compile_definitions(ranksim_flags INTERFACE RANKSIM_ASAN=1)
endif()
# RANKSIM_FUZZ: libFuzzer's coverage instrumentation on every ranksim source; the fuzz targets
# themselves add -fsanitize=fuzzer, which links libFuzzer's main (fuzz/CMakeLists.txt).
if(RANKSIM_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang" OR NOT RANKSIM_SANITIZE)
    message(FATAL_ERROR "RANKSIM_FUZZ needs clang (libFuzzer) and RANKSIM_SANITIZE=ON: "
                        "use the preset, cmake --preset fuzz (scripts/fuzz.sh)")
  endif()
  target_compile_options(ranksim_flags INTERFACE -fsanitize=fuzzer-no-link)
endif()
if(CMAKE_BUILD_TYPE STREQUAL "Debug" OR RANKSIM_SANITIZE)
  # Guard pages below each fiber stack turn a stack overflow into a clean fault.
  target_compile_definitions(ranksim_flags INTERFACE RANKSIM_GUARD_PAGES_DEFAULT=1)
endif()

# ranksim_folder_library(NAME folder DEPS ...): one static library per source folder, built from
# every .cpp in it (the folders are the architecture; no hand-kept file lists).
# EXCLUDE regex: sources left to another target (a subfolder built only with an option).
# With RANKSIM_WITH_CUDA the folder's .cu files (its own device kernels, registered for the CUDA
# device) are built into the library too, which then links ranksim_cuda.
#
# Headers are found from the repository root in the build ("sim/time.h") and from
# include/ranksim once installed (cmake/Install.cmake), so the same #include lines work in both;
# include/ too, for users who write "ranksim/sim/time.h". ranksim_flags is private: the warning,
# -march and -Werror flags build ranksim and never reach a user's targets (ranksim_use_flags
# gives them to ranksim's own tests and programs).
function(ranksim_folder_library name folder)
  cmake_parse_arguments(ARG "" "EXCLUDE" "DEPS" ${ARGN})
  file(GLOB_RECURSE srcs CONFIGURE_DEPENDS ${folder}/*.cpp)
  set(cuda_srcs "")
  if(RANKSIM_WITH_CUDA)
    file(GLOB_RECURSE cuda_srcs CONFIGURE_DEPENDS ${folder}/*.cu)
  endif()
  if(ARG_EXCLUDE)
    list(FILTER srcs EXCLUDE REGEX "${ARG_EXCLUDE}")
    list(FILTER cuda_srcs EXCLUDE REGEX "${ARG_EXCLUDE}")
  endif()
  if(cuda_srcs)
    list(APPEND srcs ${cuda_srcs})
    list(APPEND ARG_DEPS ranksim_cuda)
  endif()
  if(srcs)
    add_library(${name} STATIC ${srcs})
    set(scope PUBLIC)
    target_link_libraries(${name} PRIVATE $<BUILD_INTERFACE:ranksim_flags>)
  else()
    add_library(${name} INTERFACE)
    set(scope INTERFACE)
  endif()
  ranksim_public_includes(${name})
  target_compile_features(${name} ${scope} cxx_std_20)
  target_link_libraries(${name} ${scope} ${ARG_DEPS})
endfunction()

# ranksim_public_includes(TARGET): the include directories of a library users link (see above).
function(ranksim_public_includes name)
  get_target_property(type ${name} TYPE)
  set(scope PUBLIC)
  if(type STREQUAL "INTERFACE_LIBRARY")
    set(scope INTERFACE)
  endif()
  target_include_directories(${name} ${scope} $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>
    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}/ranksim> $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
endfunction()

# ranksim_use_flags(TARGET ...): ranksim's own flags for a test, benchmark or program of this tree.
function(ranksim_use_flags)
  foreach(t ${ARGN})
    target_link_libraries(${t} PRIVATE ranksim_flags)
  endforeach()
endfunction()
