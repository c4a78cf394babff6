# SPDX-License-Identifier: MIT
# The tensor-core decode product's own source (src/backends/gpu/vendor/cuda/matvec_mma.cu) and the
# prefill products' (matmul_pipe.cu, matmul_wgmma.cu) on the host emulation of the CUDA dialect,
# with an emulated mma.sync m16n8k16 and wgmma.mma_async, against the CPU's dequantization
# (tests/gpu/mma_emulation/run.sh; gcc and g++ only, ~2 minutes on two cores in its quick form); and
# the mutation check of the wgmma product's emulation (tests/gpu/mma_emulation/mutants.sh: planted
# faults in the kernel's host copy must fail). Both compile their own objects from the sources, not
# from the build's library, so they run in the plain CPU build only: a sanitizer or GPU build would
# repeat the very same work (CI runs all of them).
find_program(MLXCEL_GXX g++)
if(MLXCEL_GXX AND NOT MLXCEL_CUDA AND NOT MLXCEL_ROCM AND NOT MLXCEL_SANITIZE)
  add_test(NAME gpu_mma_emulation COMMAND sh ${PROJECT_SOURCE_DIR}/tests/gpu/mma_emulation/run.sh quick
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(gpu_mma_emulation PROPERTIES ENVIRONMENT "MLXCEL_EMU_OUT=${CMAKE_BINARY_DIR}/mma_emulation")
  add_test(NAME gpu_wgmma_mutants COMMAND sh ${PROJECT_SOURCE_DIR}/tests/gpu/mma_emulation/mutants.sh
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(gpu_wgmma_mutants PROPERTIES ENVIRONMENT "MLXCEL_EMU_OUT=${CMAKE_BINARY_DIR}/mma_emulation")
endif()
