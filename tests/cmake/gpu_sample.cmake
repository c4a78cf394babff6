# SPDX-License-Identifier: MIT
# In GPU builds, the backend sampling test (tests/unit/test_backend_sample.c) also runs on the GPU
# backend; skipped (exit 77) on a machine without a usable GPU. At the default MLXCEL_GPU_PDL=3 the
# token choice's launches (the one-block and split forms, the fast form's) are dependent launches,
# each grid wait first; gpu_backend_sample_pdl2 runs it with MLXCEL_GPU_PDL=2 (the former default),
# where they are plain launches.
if((MLXCEL_CUDA OR MLXCEL_ROCM) AND TARGET test_backend_sample)
  foreach(variant IN ITEMS "" "pdl2")
    set(name gpu_backend_sample)
    set(env "MLXCEL_TEST_BACKEND=${MLXCEL_GPU_RUNTIME_NAME}")
    if(variant)
      set(name gpu_backend_sample_${variant})
      set(env "${env};MLXCEL_GPU_PDL=2")
    endif()
    add_test(NAME ${name}
             COMMAND ${PROJECT_SOURCE_DIR}/tests/gpu/if_gpu.sh $<TARGET_FILE:mlxcel> $<TARGET_FILE:test_backend_sample>
             WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
    set_tests_properties(${name} PROPERTIES SKIP_RETURN_CODE 77 LABELS gpu ENVIRONMENT "${env}")
  endforeach()
endif()
