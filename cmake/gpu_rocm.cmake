# SPDX-License-Identifier: MIT
# AMD part of the GPU build (included by cmake/gpu.cmake when MLXCEL_ROCM is ON).
#
# The .cu files are compiled by invoking hipcc directly (one custom command per file, producing an
# object that joins mlxcel_lib), not through CMake's HIP language: CMake 3.25's HIP support cannot
# find Debian's multiarch hip-lang package, and calling hipcc works the same with Debian's ROCm 5.2
# (/usr/bin/hipcc, /usr/lib/x86_64-linux-gnu/libamdhip64.so) and with ROCm 6/7 under $ROCM_PATH.
# Header changes rebuild the objects through hipcc's depfiles.
#
# Architectures: MLXCEL_ROCM_ARCHITECTURES, else MLX_ROCM_ARCHITECTURES (cache or environment),
# else the GPU agents of `rocminfo` (MLXCEL_ROCMINFO names the tool; tests point it at recorded
# outputs), else a configure error naming the variable.
set(MLXCEL_GPU_ARCH_VARIABLE MLXCEL_ROCM_ARCHITECTURES)
if(NOT ROCM_PATH)
  if(NOT "$ENV{ROCM_PATH}" STREQUAL "")
    set(ROCM_PATH "$ENV{ROCM_PATH}")
  else()
    set(ROCM_PATH /opt/rocm)
  endif()
endif()
set(ROCM_PATH "${ROCM_PATH}" CACHE PATH "ROCm installation (its lib/ goes into the RUNPATH)")

set(_archs "")
set(_source "")
foreach(_var MLXCEL_ROCM_ARCHITECTURES MLX_ROCM_ARCHITECTURES)
  if(_archs STREQUAL "" AND NOT "${${_var}}" STREQUAL "")
    set(_archs "${${_var}}")
    set(_source "${_var}")
  elseif(_archs STREQUAL "" AND NOT "$ENV{${_var}}" STREQUAL "")
    set(_archs "$ENV{${_var}}")
    set(_source "environment ${_var}")
  endif()
endforeach()
if(_archs STREQUAL "")
  find_program(MLXCEL_ROCMINFO rocminfo HINTS ${ROCM_PATH}/bin)
  set(_out "")
  if(MLXCEL_ROCMINFO)
    execute_process(COMMAND ${MLXCEL_ROCMINFO} OUTPUT_VARIABLE _out ERROR_QUIET RESULT_VARIABLE _rc TIMEOUT 60)
  endif()
  mlxcel_parse_rocminfo("${_out}" _archs)
  if(_archs STREQUAL "")
    message(FATAL_ERROR "mlxcel: cannot tell which AMD GPU architectures to build for: "
      "rocminfo found no GPU agent (tool: '${MLXCEL_ROCMINFO}'). Set them explicitly, e.g. "
      "cmake --preset rocm -DMLXCEL_ROCM_ARCHITECTURES=gfx1100 (gfx90a = MI200, gfx942 = MI300, "
      "gfx1030 = RX 6800/6900, gfx1100 = RX 7900, gfx1151 = Strix Halo; ';'-separated for several).")
  endif()
  set(_source "rocminfo")
endif()
mlxcel_normalize_rocm_archs("${_archs}" MLXCEL_GPU_ARCH_LIST _err)
if(_err)
  message(FATAL_ERROR "mlxcel: bad ROCm architecture list '${_archs}' (${_source}): ${_err}. "
    "Example: -DMLXCEL_ROCM_ARCHITECTURES=\"gfx90a;gfx1100\".")
endif()
set(MLXCEL_ROCM_ARCHITECTURES "${MLXCEL_GPU_ARCH_LIST}" CACHE STRING "AMD GPU architectures to build for (e.g. gfx1100 or gfx90a;gfx942)" FORCE)
message(STATUS "mlxcel: ROCm architectures ${MLXCEL_GPU_ARCH_LIST} (from ${_source})")

find_program(MLXCEL_HIPCC hipcc HINTS ${ROCM_PATH}/bin)
if(NOT MLXCEL_HIPCC)
  message(FATAL_ERROR "mlxcel: MLXCEL_ROCM=ON but hipcc was not found under ${ROCM_PATH}/bin or on PATH. "
    "Install ROCm (or on Debian/Ubuntu: apt-get install hipcc libamdhip64-dev) or pass -DROCM_PATH=...")
endif()
find_library(MLXCEL_AMDHIP64_LIBRARY amdhip64 HINTS ${ROCM_PATH}/lib ${ROCM_PATH}/lib64)
if(NOT MLXCEL_AMDHIP64_LIBRARY)
  message(FATAL_ERROR "mlxcel: the HIP runtime library (libamdhip64) was not found under ${ROCM_PATH}/lib "
    "or the system folders. Install ROCm's HIP runtime (Debian/Ubuntu: libamdhip64-dev) or pass -DROCM_PATH=...")
endif()
execute_process(COMMAND ${MLXCEL_HIPCC} --version OUTPUT_VARIABLE _hipver ERROR_QUIET TIMEOUT 60)
set(_hip_version "unknown")
if(_hipver MATCHES "HIP version: ([0-9]+\\.[0-9]+)")
  set(_hip_version "${CMAKE_MATCH_1}")
endif()

# One object per kernel file. The flags are the whole contract with hipcc: HIP source, C++17, -fPIC
# for position-independent executables, the warnings the C code gets (-Wall -Wextra, and -Werror
# with MLXCEL_WERROR=ON), one --offload-arch per architecture.
set(_hip_flags -x hip -std=c++17 -O3 -fPIC -DNDEBUG -DMXG_VENDOR_HIP=1 -Wall -Wextra -Wno-unused-command-line-argument)
if(MLXCEL_WERROR)
  list(APPEND _hip_flags -Werror)
endif()
foreach(_a IN LISTS MLXCEL_GPU_ARCH_LIST)
  list(APPEND _hip_flags --offload-arch=${_a})
endforeach()
set(_hip_includes -I${PROJECT_SOURCE_DIR}/include -I${PROJECT_SOURCE_DIR}/src -I${MLXCEL_GPU_GENERATED_DIR})
file(GLOB _vendor_sources CONFIGURE_DEPENDS ${MLXCEL_GPU_DIR}/vendor/hip/*.cu)
set(_objects "")
foreach(_src IN LISTS MLXCEL_GPU_KERNEL_SOURCES _vendor_sources)
  file(RELATIVE_PATH _rel ${MLXCEL_GPU_DIR} ${_src})
  string(REGEX REPLACE "[/.]" "_" _name "${_rel}")
  set(_obj ${PROJECT_BINARY_DIR}/hip_objects/${_name}.o)
  add_custom_command(
    OUTPUT ${_obj}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${PROJECT_BINARY_DIR}/hip_objects
    COMMAND ${MLXCEL_HIPCC} ${_hip_flags} ${_hip_includes} -MD -MF ${_obj}.d -c ${_src} -o ${_obj}
    DEPENDS ${_src}
    DEPFILE ${_obj}.d
    COMMENT "hipcc ${_rel}"
    VERBATIM)
  list(APPEND _objects ${_obj})
endforeach()
set_source_files_properties(${_objects} PROPERTIES EXTERNAL_OBJECT TRUE GENERATED TRUE)
target_sources(mlxcel_lib PRIVATE ${_objects})
target_link_libraries(mlxcel_lib PUBLIC ${MLXCEL_AMDHIP64_LIBRARY} stdc++)

get_filename_component(_hip_libdir ${MLXCEL_AMDHIP64_LIBRARY} DIRECTORY)
set(MLXCEL_GPU_RUNTIME_NAME rocm)
set(MLXCEL_GPU_TOOLKIT "HIP ${_hip_version}")
set(MLXCEL_GPU_RUNTIME_LIBDIR ${ROCM_PATH}/lib)
if(NOT _hip_libdir STREQUAL "${ROCM_PATH}/lib" AND NOT _hip_libdir IN_LIST CMAKE_C_IMPLICIT_LINK_DIRECTORIES)
  list(APPEND MLXCEL_GPU_RUNTIME_LIBDIR ${_hip_libdir})
endif()
