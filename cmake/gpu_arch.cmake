# SPDX-License-Identifier: MIT
# GPU architecture resolution, kept free of side effects so that it can be unit-tested in script
# mode (cmake -P) on any machine: parsers for recorded `rocminfo` and `nvidia-smi` output, the
# normalization of user-given lists, and the platform check. cmake/gpu.cmake calls these at
# configure time; tests/gpu/test_arch_parse.cmake calls them on the samples in tests/gpu/samples/.

# mlxcel_parse_rocminfo(<text> <out_var>)
# Returns the unique gfx names of GPU agents, in agent order. rocminfo prints one block per agent
# ("Agent N" between star rules); the block's first "Name:" is the agent name, "Device Type:" says
# CPU, GPU or DSP. ISA names inside a GPU block ("amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack-") are
# ignored: the agent name already carries the architecture. Feature suffixes (":xnack-") are dropped.
function(mlxcel_parse_rocminfo text out_var)
  string(REPLACE ";" "," text "${text}")
  string(REPLACE "\r" "" text "${text}")
  string(REPLACE "\n" ";" lines "${text}")
  set(result "")
  set(in_agent FALSE)
  set(agent_name "")
  set(agent_type "")
  # A sentinel agent header flushes the last block.
  list(APPEND lines "Agent 999999")
  foreach(line IN LISTS lines)
    if(line MATCHES "^[ \t]*Agent [0-9]+[ \t]*$")
      if(in_agent AND agent_type STREQUAL "GPU" AND agent_name MATCHES "^(gfx[0-9a-fA-F]+)")
        string(TOLOWER "${CMAKE_MATCH_1}" arch)
        if(NOT arch IN_LIST result)
          list(APPEND result "${arch}")
        endif()
      endif()
      set(in_agent TRUE)
      set(agent_name "")
      set(agent_type "")
    elseif(in_agent AND agent_name STREQUAL "" AND line MATCHES "^[ \t]*Name:[ \t]*(.*[^ \t])[ \t]*$")
      set(agent_name "${CMAKE_MATCH_1}")
    elseif(in_agent AND line MATCHES "^[ \t]*Device Type:[ \t]*([A-Za-z]+)")
      string(TOUPPER "${CMAKE_MATCH_1}" agent_type)
    endif()
  endforeach()
  set(${out_var} "${result}" PARENT_SCOPE)
endfunction()

# mlxcel_parse_nvidia_smi(<text> <out_var>)
# Input: the output of `nvidia-smi --query-gpu=compute_cap --format=csv,noheader`, one "major.minor"
# line per GPU. Returns the unique CUDA architectures ("9.0" -> "90"), in GPU order. Anything else
# (error text such as "No devices were found") contributes nothing.
function(mlxcel_parse_nvidia_smi text out_var)
  string(REPLACE ";" "," text "${text}")
  string(REPLACE "\r" "" text "${text}")
  string(REPLACE "\n" ";" lines "${text}")
  set(result "")
  foreach(line IN LISTS lines)
    if(line MATCHES "^[ \t]*([0-9]+)\\.([0-9]+)[ \t]*$")
      set(arch "${CMAKE_MATCH_1}${CMAKE_MATCH_2}")
      if(NOT arch IN_LIST result)
        list(APPEND result "${arch}")
      endif()
    endif()
  endforeach()
  set(${out_var} "${result}" PARENT_SCOPE)
endfunction()

# mlxcel_normalize_cuda_archs(<list> <out_var> <err_var>)
# Accepts "90", "9.0", "90a", "90-real", "90a-virtual", separated by ';', ',' or spaces. Writes the
# CMake CUDA_ARCHITECTURES form, or an error message into err_var (empty when fine).
function(mlxcel_normalize_cuda_archs list out_var err_var)
  _mlxcel_normalize_archs(cuda "${list}" result err)
  set(${out_var} "${result}" PARENT_SCOPE)
  set(${err_var} "${err}" PARENT_SCOPE)
endfunction()

# mlxcel_normalize_rocm_archs(<list> <out_var> <err_var>)
# Accepts gfx names ("gfx90a", "gfx942", "gfx1151", with optional feature suffixes such as
# "gfx90a:xnack+"), separated by ';', ',' or spaces.
function(mlxcel_normalize_rocm_archs list out_var err_var)
  _mlxcel_normalize_archs(rocm "${list}" result err)
  set(${out_var} "${result}" PARENT_SCOPE)
  set(${err_var} "${err}" PARENT_SCOPE)
endfunction()

# _mlxcel_normalize_archs(<cuda|rocm> <list> <out_var> <err_var>): the two normalizers' walk. Each
# name in its vendor's form (CUDA "9.0" as "90"; gfx names in lower case), duplicates dropped; the
# error names the first entry that is not an architecture, or says the list is empty.
function(_mlxcel_normalize_archs vendor list out_var err_var)
  string(REGEX REPLACE "[, \t]+" ";" list "${list}")
  set(result "")
  set(err "")
  foreach(a IN LISTS list)
    if(a STREQUAL "")
      continue()
    endif()
    if(vendor STREQUAL "cuda")
      if(a MATCHES "^([0-9]+)\\.([0-9])$")
        set(a "${CMAKE_MATCH_1}${CMAKE_MATCH_2}")
      endif()
      set(form "^[1-9][0-9]+[af]?(-real|-virtual)?$")
      set(expected "a CUDA architecture (expected compute capabilities such as 80, 86, 89, 90 or 9.0)")
    else()
      string(TOLOWER "${a}" a)
      set(form "^gfx[0-9a-f]+(:[a-z0-9]+[+-])*$")
      set(expected "an AMD GPU architecture (expected names such as gfx90a, gfx942, gfx1100, gfx1151)")
    endif()
    if(NOT a MATCHES "${form}")
      set(err "'${a}' is not ${expected}")
      break()
    endif()
    if(NOT a IN_LIST result)
      list(APPEND result "${a}")
    endif()
  endforeach()
  if(err STREQUAL "" AND result STREQUAL "")
    set(err "the list is empty")
  endif()
  set(${out_var} "${result}" PARENT_SCOPE)
  set(${err_var} "${err}" PARENT_SCOPE)
endfunction()

# mlxcel_gpu_platform_error(<system_name> <cuda> <rocm> <out_var>)
# The configure-time refusals, as a message (empty when the combination is fine).
function(mlxcel_gpu_platform_error system cuda rocm out_var)
  set(msg "")
  if(cuda AND rocm)
    set(msg "MLXCEL_CUDA and MLXCEL_ROCM are both ON: choose one GPU backend per build folder (cmake --preset cuda or cmake --preset rocm).")
  elseif(rocm AND NOT system STREQUAL "Linux")
    set(msg "MLXCEL_ROCM=ON needs a Linux host (ROCm/HIP is Linux-only here); this host is ${system}. Use the cpu preset.")
  endif()
  set(${out_var} "${msg}" PARENT_SCOPE)
endfunction()
