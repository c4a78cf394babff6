# SPDX-License-Identifier: MIT
# The GPU's KV cache and attention kernels (kv_store, the fused q/k norm + RoPE + store, attention,
# flash-decoding, latent) on the host emulation of the CUDA dialect against the CPU backend, MoE's
# router and fused decode, and the streaming kernel's lean form against today's (bit for bit),
# MLXCEL_GPU_PDL=2's L2 prefetch ranges, level 3's order of the attention launches (emu.h's emulated grid wait),
# the residual epilogue with its reads ahead (kernels/matvec_res_early.cuh: bit for bit today's),
# with planted faults (tests/gpu/kv_emulation/run.sh, its quick form: I16 cache, half the head sizes). Only in a
# CPU build without sanitizers: it links this build's library beside the emulated kernels, which a
# GPU build already holds compiled for the device.
find_program(MLXCEL_GXX g++)
# One ctest test for each of run.sh's tests (each in a folder of its own), so that a parallel ctest
# shares them between cores; COST (seconds on two cores) starts the long ones first.
if(MLXCEL_GXX AND NOT MLXCEL_CUDA AND NOT MLXCEL_ROCM AND NOT MLXCEL_SANITIZE AND MLXCEL_HUB)
  foreach(entry stream_lean:280 res_early:220 moe:420 kv:330)
    string(REPLACE ":" ";" entry ${entry})
    list(GET entry 0 part)
    list(GET entry 1 cost)
    add_test(NAME gpu_kv_emulation_${part} COMMAND sh ${PROJECT_SOURCE_DIR}/tests/gpu/kv_emulation/run.sh quick
             WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
    set_tests_properties(gpu_kv_emulation_${part} PROPERTIES COST ${cost} ENVIRONMENT
      "MLXCEL_EMU_LIB=${CMAKE_BINARY_DIR};MLXCEL_EMU_OUT=${CMAKE_BINARY_DIR}/kv_emulation_${part};MLXCEL_EMU_ONLY=test_${part}_emulated")
  endforeach()
endif()
