# The GPU backend (runtime/distributed/backends/nccl): CUDA runtime, cuBLAS and NCCL, built as the library
# ranksim_gpu when RANKSIM_WITH_CUDA is ON. Default: ON when nvcc, the CUDA toolkit and NCCL are
# found (the toolkit's standard place, /usr/local/cuda, is searched too), OFF under the sanitizers
# (AddressSanitizer and the CUDA runtime do not mix) and when anything is missing. Building needs
# no GPU; the tests labelled `gpu` skip themselves, saying why, when none is present.
include(CheckLanguage)
if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND EXISTS /usr/local/cuda/bin/nvcc)
  set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
endif()
set(RANKSIM_WITH_CUDA_DEFAULT OFF)
if(NOT RANKSIM_SANITIZE)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    find_package(CUDAToolkit QUIET)
    if(CUDAToolkit_FOUND)
      find_path(RANKSIM_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
      find_library(RANKSIM_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR})
      if(RANKSIM_NCCL_INCLUDE_DIR AND RANKSIM_NCCL_LIBRARY)
        set(RANKSIM_WITH_CUDA_DEFAULT ON)
      endif()
    endif()
  endif()
endif()
ranksim_auto_option(RANKSIM_WITH_CUDA "Build the GPU backend (CUDA, cuBLAS, NCCL; default ON when found)"
                    "${RANKSIM_WITH_CUDA_DEFAULT}")
if(RANKSIM_WITH_CUDA)
  if(RANKSIM_SANITIZE)
    message(FATAL_ERROR "RANKSIM_WITH_CUDA cannot be combined with RANKSIM_SANITIZE")
  endif()
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES 80 90)  # A100, H100
  endif()
  # The shared CUDA runtime (as CUDA::cudart): the static one's implicit -lcudart_static and
  # -lcudadevrt come without their folder when a C++ linker links the tests.
  set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)
  enable_language(CUDA)
  # CMake 3.25 knows nvcc's dialect flags only up to C++17; nvcc >= 12 takes -std=c++20.
  if(CMAKE_CUDA_COMPILER_VERSION VERSION_GREATER_EQUAL 12.0 AND NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
    list(APPEND CMAKE_CUDA_COMPILE_FEATURES cuda_std_20)
  endif()
  # Targets the GPU library links (Eigen, Boost) name /usr/include; given to nvcc as -isystem it
  # breaks libstdc++'s #include_next <math.h>. It is the host compiler's own directory anyway.
  list(APPEND CMAKE_CUDA_IMPLICIT_INCLUDE_DIRECTORIES /usr/include)
  set(CMAKE_CUDA_STANDARD 20)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  find_package(CUDAToolkit REQUIRED)
  find_path(RANKSIM_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
  find_library(RANKSIM_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR})
  if(NOT RANKSIM_NCCL_INCLUDE_DIR OR NOT RANKSIM_NCCL_LIBRARY)
    message(FATAL_ERROR "RANKSIM_WITH_CUDA is ON but NCCL (nccl.h, libnccl) was not found beside the CUDA "
                        "toolkit; install NCCL or configure with -DRANKSIM_WITH_CUDA=OFF")
  endif()
endif()
message(STATUS "ranksim: GPU backend (CUDA + NCCL) ${RANKSIM_WITH_CUDA}")
