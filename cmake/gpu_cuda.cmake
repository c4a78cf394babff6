# SPDX-License-Identifier: MIT
# NVIDIA part of the GPU build (included by cmake/gpu.cmake when MLXCEL_CUDA is ON). Uses CMake's
# CUDA language with nvcc. Architectures: MLXCEL_CUDA_ARCHITECTURES (cache or environment), else
# `nvidia-smi --query-gpu=compute_cap --format=csv,noheader` (MLXCEL_NVIDIA_SMI names the tool;
# tests point it at recorded outputs), else a configure error naming the variable.
set(MLXCEL_GPU_ARCH_VARIABLE MLXCEL_CUDA_ARCHITECTURES)
set(_archs "")
set(_source "")
if(NOT "${MLXCEL_CUDA_ARCHITECTURES}" STREQUAL "")
  set(_archs "${MLXCEL_CUDA_ARCHITECTURES}")
  set(_source "MLXCEL_CUDA_ARCHITECTURES")
elseif(NOT "$ENV{MLXCEL_CUDA_ARCHITECTURES}" STREQUAL "")
  set(_archs "$ENV{MLXCEL_CUDA_ARCHITECTURES}")
  set(_source "environment MLXCEL_CUDA_ARCHITECTURES")
else()
  find_program(MLXCEL_NVIDIA_SMI nvidia-smi)
  set(_out "")
  if(MLXCEL_NVIDIA_SMI)
    execute_process(COMMAND ${MLXCEL_NVIDIA_SMI} --query-gpu=compute_cap --format=csv,noheader
                    OUTPUT_VARIABLE _out ERROR_QUIET RESULT_VARIABLE _rc TIMEOUT 60)
  endif()
  mlxcel_parse_nvidia_smi("${_out}" _archs)
  if(_archs STREQUAL "")
    message(FATAL_ERROR "mlxcel: cannot tell which NVIDIA GPU architectures to build for: "
      "`nvidia-smi --query-gpu=compute_cap` found no GPU (tool: '${MLXCEL_NVIDIA_SMI}'). "
      "Set them explicitly, e.g. cmake --preset cuda -DMLXCEL_CUDA_ARCHITECTURES=90 "
      "(80 = A100, 86 = RTX 30xx, 89 = RTX 40xx/L40, 90 = H100/H200, 120 = RTX 50xx; ';'-separated for several).")
  endif()
  set(_source "nvidia-smi")
endif()
mlxcel_normalize_cuda_archs("${_archs}" MLXCEL_GPU_ARCH_LIST _err)
if(_err)
  message(FATAL_ERROR "mlxcel: bad CUDA architecture list '${_archs}' (${_source}): ${_err}. "
    "Example: -DMLXCEL_CUDA_ARCHITECTURES=\"80;90\".")
endif()
# Cache the resolved list so that later reconfigures are stable and do not probe again.
set(MLXCEL_CUDA_ARCHITECTURES "${MLXCEL_GPU_ARCH_LIST}" CACHE STRING "CUDA architectures to build for (e.g. 90 or 80;90)" FORCE)
message(STATUS "mlxcel: CUDA architectures ${MLXCEL_GPU_ARCH_LIST} (from ${_source})")

include(CheckLanguage)
check_language(CUDA)
if(NOT CMAKE_CUDA_COMPILER)
  message(FATAL_ERROR "mlxcel: MLXCEL_CUDA=ON but no CUDA compiler (nvcc) was found. Install the CUDA "
    "toolkit, put its bin/ on PATH or pass -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc.")
endif()
set(CMAKE_CUDA_ARCHITECTURES ${MLXCEL_GPU_ARCH_LIST})
enable_language(CUDA)
find_package(CUDAToolkit REQUIRED)

# The top-level add_compile_options (-Wall -Wextra, -Werror, sanitizers) are gcc flags; nvcc
# misreads them (its -Werror takes an argument). Keep them for C only on the library that gets the
# .cu files; CUDA host code gets the warnings through -Xcompiler below.
get_target_property(_opts mlxcel_lib COMPILE_OPTIONS)
if(_opts)
  set(_c_only "")
  foreach(_o IN LISTS _opts)
    list(APPEND _c_only "$<$<COMPILE_LANGUAGE:C>:${_o}>")
  endforeach()
  set_target_properties(mlxcel_lib PROPERTIES COMPILE_OPTIONS "${_c_only}")
endif()

file(GLOB _vendor_sources CONFIGURE_DEPENDS ${MLXCEL_GPU_DIR}/vendor/cuda/*.cu)
target_sources(mlxcel_lib PRIVATE ${MLXCEL_GPU_KERNEL_SOURCES} ${_vendor_sources})
set_target_properties(mlxcel_lib PROPERTIES
  CUDA_ARCHITECTURES "${MLXCEL_GPU_ARCH_LIST}"
  CUDA_STANDARD 17
  CUDA_STANDARD_REQUIRED ON
  CUDA_RUNTIME_LIBRARY Shared)
target_compile_definitions(mlxcel_lib PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:MXG_VENDOR_CUDA=1>)
target_compile_options(mlxcel_lib PRIVATE
  $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra --expt-relaxed-constexpr>)
target_link_libraries(mlxcel_lib PUBLIC CUDA::cudart)

set(MLXCEL_GPU_RUNTIME_NAME cuda)
set(MLXCEL_GPU_TOOLKIT "CUDA ${CUDAToolkit_VERSION}")
set(MLXCEL_GPU_RUNTIME_LIBDIR ${CUDAToolkit_LIBRARY_DIR})
