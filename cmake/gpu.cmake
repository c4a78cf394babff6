# SPDX-License-Identifier: MIT
# GPU backend build (CUDA or ROCm from one kernel source). Owned by the GPU backend work; until it
# lands, asking for a GPU backend is a clear configure error.
if(MLXCEL_CUDA AND MLXCEL_ROCM)
  message(FATAL_ERROR "MLXCEL_CUDA and MLXCEL_ROCM are both ON: choose one GPU backend per build folder (cmake --preset cuda or cmake --preset rocm).")
endif()
