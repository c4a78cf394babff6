# SPDX-License-Identifier: MIT
# In GPU builds, the backend sampling test (tests/unit/test_backend_sample.c) also runs on the GPU
# backend; skipped (exit 77) on a machine without a usable GPU.
if((MLXCEL_CUDA OR MLXCEL_ROCM) AND TARGET test_backend_sample)
  add_test(NAME gpu_backend_sample
           COMMAND ${PROJECT_SOURCE_DIR}/tests/gpu/if_gpu.sh $<TARGET_FILE:mlxcel> $<TARGET_FILE:test_backend_sample>
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(gpu_backend_sample PROPERTIES SKIP_RETURN_CODE 77 LABELS gpu
                       ENVIRONMENT "MLXCEL_TEST_BACKEND=${MLXCEL_GPU_RUNTIME_NAME}")
endif()
