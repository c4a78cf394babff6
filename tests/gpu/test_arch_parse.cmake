# SPDX-License-Identifier: MIT
# Unit test (cmake -P) of the architecture parsers and list normalizers in cmake/gpu_arch.cmake,
# on recorded rocminfo / nvidia-smi outputs under tests/gpu/samples/. Runs in every build (no GPU,
# no ROCm or CUDA needed). Usage: cmake -DSRC=<repo root> -P tests/gpu/test_arch_parse.cmake
cmake_minimum_required(VERSION 3.21)
include(${SRC}/cmake/gpu_arch.cmake)
set(failures 0)

function(expect what got want)
  if(NOT "${got}" STREQUAL "${want}")
    message(SEND_ERROR "${what}: got '${got}', want '${want}'")
  else()
    message(STATUS "ok: ${what} -> '${got}'")
  endif()
endfunction()

# expect_samples(PARSER CASE...): each CASE "FILE=WANT" (WANT a comma-separated list, maybe empty)
# checks that PARSER (mlxcel_parse_rocminfo or mlxcel_parse_nvidia_smi) finds WANT in the recorded
# output tests/gpu/samples/FILE.
function(expect_samples parser)
  foreach(case IN LISTS ARGN)
    string(REPLACE "=" ";" parts "${case}")
    list(GET parts 0 file)
    list(LENGTH parts n)
    set(want "")
    if(n GREATER 1)
      list(GET parts 1 want)
      string(REPLACE "," ";" want "${want}")
    endif()
    file(READ ${SRC}/tests/gpu/samples/${file} text)
    cmake_language(CALL ${parser} "${text}" got)
    expect("${file}" "${got}" "${want}")
  endforeach()
endfunction()

expect_samples(mlxcel_parse_rocminfo
    "rocminfo_gfx1151.txt=gfx1151"
    "rocminfo_gfx942_mi300x.txt=gfx942"
    "rocminfo_gfx90a.txt=gfx90a"
    "rocminfo_cpu_first_two_gpus.txt=gfx1100,gfx1030"
    "rocminfo_cpu_only.txt=")
expect_samples(mlxcel_parse_nvidia_smi
    "nvidia_smi_h200.txt=90"
    "nvidia_smi_multi.txt=80,86,89"
    "nvidia_smi_no_device.txt="
    "nvidia_smi_driver_failed.txt=")

# User-given lists.
mlxcel_normalize_cuda_archs("9.0;80,86 90" got err)
expect("cuda list" "${got}|${err}" "90;80;86|")
mlxcel_normalize_cuda_archs("90a;120-real" got err)
expect("cuda suffixes" "${got}|${err}" "90a;120-real|")
mlxcel_normalize_cuda_archs("sm_90" got err)
expect("cuda bad name" "${err}" "'sm_90' is not a CUDA architecture (expected compute capabilities such as 80, 86, 89, 90 or 9.0)")
mlxcel_normalize_cuda_archs("" got err)
expect("cuda empty" "${err}" "the list is empty")
mlxcel_normalize_rocm_archs("gfx90a;GFX1100,gfx942:sramecc+:xnack-" got err)
expect("rocm list" "${got}|${err}" "gfx90a;gfx1100;gfx942:sramecc+:xnack-|")
mlxcel_normalize_rocm_archs("mi300" got err)
expect("rocm bad name" "${err}" "'mi300' is not an AMD GPU architecture (expected names such as gfx90a, gfx942, gfx1100, gfx1151)")

# Platform refusals.
mlxcel_gpu_platform_error("Linux" ON ON msg)
expect("cuda+rocm" "${msg}" "MLXCEL_CUDA and MLXCEL_ROCM are both ON: choose one GPU backend per build folder (cmake --preset cuda or cmake --preset rocm).")
mlxcel_gpu_platform_error("Darwin" OFF ON msg)
expect("rocm on Darwin" "${msg}" "MLXCEL_ROCM=ON needs a Linux host (ROCm/HIP is Linux-only here); this host is Darwin. Use the cpu preset.")
mlxcel_gpu_platform_error("Windows" ON OFF msg)
expect("cuda on Windows" "${msg}" "")
mlxcel_gpu_platform_error("Linux" OFF ON msg)
expect("rocm on Linux" "${msg}" "")
