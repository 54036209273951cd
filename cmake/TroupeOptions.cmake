# Build options shared by every module: warnings, sanitizers and CUDA detection.

add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-Wall> $<$<COMPILE_LANGUAGE:CXX>:-Wextra>)

# Math functions set no errno. With errno (GCC's default) a loop calling std::sqrt keeps a library call per
# element and does not vectorise: Adam's CPU update of 100 k floats took 265 us, 65 without. The results are
# the same (sqrt is correctly rounded either way). troupe reads errno only after system calls and
# strtod/strtol, which this flag does not touch.
add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-fno-math-errno>)

if(TROUPE_SANITIZE)
  if(TROUPE_SANITIZE STREQUAL "address")
    set(_troupe_san_flags -fsanitize=address -fno-omit-frame-pointer)
  elseif(TROUPE_SANITIZE STREQUAL "thread")
    set(_troupe_san_flags -fsanitize=thread)
  elseif(TROUPE_SANITIZE STREQUAL "undefined")
    set(_troupe_san_flags -fsanitize=undefined -fno-sanitize-recover=undefined)
  else()
    message(FATAL_ERROR "TROUPE_SANITIZE must be address, thread or undefined, not '${TROUPE_SANITIZE}'")
  endif()
  foreach(flag IN LISTS _troupe_san_flags)
    add_compile_options($<$<COMPILE_LANGUAGE:CXX>:${flag}>)
  endforeach()
  add_link_options(${_troupe_san_flags})
  message(STATUS "troupe: sanitizer ${TROUPE_SANITIZE}")
endif()

# CUDA: on when nvcc is found, unless -DTROUPE_USE_CUDA=OFF. Sanitizer builds are CPU-only.
if(NOT DEFINED TROUPE_USE_CUDA)
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER AND NOT TROUPE_SANITIZE)
    set(_troupe_cuda_default ON)
  else()
    set(_troupe_cuda_default OFF)
  endif()
  set(TROUPE_USE_CUDA ${_troupe_cuda_default} CACHE BOOL "Build the CUDA device code")
endif()
if(TROUPE_USE_CUDA)
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES 90)
  endif()
  if(NOT DEFINED CMAKE_CUDA_HOST_COMPILER)
    set(CMAKE_CUDA_HOST_COMPILER ${CMAKE_CXX_COMPILER})
  endif()
  enable_language(CUDA)
  # CMake 3.25 does not know nvcc 13's C++20 flag (targets that mix CXX_STANDARD 20 and .cu files would fail
  # at generate time): teach it.
  if(NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
    list(APPEND CMAKE_CUDA_COMPILE_FEATURES cuda_std_20)
  endif()
  set(CMAKE_CUDA_STANDARD 20)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  find_package(CUDAToolkit REQUIRED)
  message(STATUS "troupe: CUDA on (architectures ${CMAKE_CUDA_ARCHITECTURES})")
else()
  message(STATUS "troupe: CUDA off")
endif()
