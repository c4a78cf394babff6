# SPDX-License-Identifier: MIT
# Test registration. Every tests/unit/test_*.c is one executable and one ctest test, run from the
# repository root so fixture paths are stable. Other suites (model parity, CLI, server) add
# themselves below.
set(MLXCEL_TEST_ROOT ${PROJECT_SOURCE_DIR})
file(GLOB MLXCEL_UNIT_TESTS CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/tests/unit/test_*.c)
foreach(src ${MLXCEL_UNIT_TESTS})
  get_filename_component(name ${src} NAME_WE)
  add_executable(${name} ${src})
  target_link_libraries(${name} PRIVATE mlxcel_lib)
  add_test(NAME ${name} COMMAND ${name} WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
endforeach()
# Exit 77 is reported as skipped, with the reason printed: test_cpu_kernels on a CPU with none of the
# SIMD kernel sets it compares (after checking the scalar set), test_sample_passes on a CPU without
# AVX2 (after checking the scalar passes), test_backend_sample on a backend without the optional sample op.
set_tests_properties(test_cpu_kernels test_sample_passes test_backend_sample PROPERTIES SKIP_RETURN_CODE 77)
# The CPU's float32 KV cache (the default is int16 with scales) keeps its own, tighter parity bound.
add_test(NAME test_model_parity_kv_f32 COMMAND test_model_parity WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(test_model_parity_kv_f32 PROPERTIES ENVIRONMENT "MLXCEL_CPU_KV=f32")
# The float16 KV cache (the GPU's with MLXCEL_GPU_KV=f16) on the CPU: its rounding alone, against its bound (4e-3).
add_test(NAME test_model_parity_kv_f16 COMMAND test_model_parity WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(test_model_parity_kv_f16 PROPERTIES ENVIRONMENT "MLXCEL_CPU_KV=f16")
# The opt-in int8 KV cache (--kv-bits 8) against its own documented bound (8e-2, test_model_parity.c),
# with its default attention (the integer scores and P.V on the avx512vnni kernels, else float), and
# with each attention mode named (AVX-512 VNNI; elsewhere the float path).
add_test(NAME test_model_parity_kv_i8 COMMAND test_model_parity WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(test_model_parity_kv_i8 PROPERTIES ENVIRONMENT "MLXCEL_CPU_KV=i8")
add_test(NAME test_model_parity_kv_i8_float COMMAND test_model_parity WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(test_model_parity_kv_i8_float PROPERTIES ENVIRONMENT "MLXCEL_CPU_KV=i8;MLXCEL_CPU_ATTN_I8=float")
add_test(NAME test_model_parity_kv_i8_int COMMAND test_model_parity WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(test_model_parity_kv_i8_int PROPERTIES ENVIRONMENT "MLXCEL_CPU_KV=i8;MLXCEL_CPU_ATTN_I8=int")
add_test(NAME test_model_parity_kv_i8_pv COMMAND test_model_parity WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(test_model_parity_kv_i8_pv PROPERTIES ENVIRONMENT "MLXCEL_CPU_KV=i8;MLXCEL_CPU_ATTN_I8=pv")
# The opt-in 4-bit KV cache (--kv-bits 4) against its per-family bounds (test_model_parity.c, i4_tolerance),
# and the preemption of the engine on it (the float attention: recomputed tokens as decoded).
add_test(NAME test_model_parity_kv_i4 COMMAND test_model_parity WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(test_model_parity_kv_i4 PROPERTIES ENVIRONMENT "MLXCEL_CPU_KV=i4")
add_test(NAME test_engine_preempt_kv_i4 COMMAND test_engine_preempt WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(test_engine_preempt_kv_i4 PROPERTIES ENVIRONMENT "MLXCEL_CPU_KV=i4")
# An MLXCEL_CPU_ATTN_I8 value that is not a mode stops the CPU backend's start with an error naming it.
add_test(NAME cpu_knob_refused_attn_i8
         COMMAND ${CMAKE_COMMAND} -E env MLXCEL_CPU_ATTN_I8=intt
                 $<TARGET_FILE:mlxcel> generate -m models/qwen3-demo-44m-4bit -p Hi -n 1 --backend cpu
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(cpu_knob_refused_attn_i8 PROPERTIES
                     PASS_REGULAR_EXPRESSION "MLXCEL_CPU_ATTN_I8='intt': must be int, pv, int,pv or float")
add_test(NAME test_model_parity_kv_i8_int_pv COMMAND test_model_parity WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(test_model_parity_kv_i8_int_pv PROPERTIES ENVIRONMENT "MLXCEL_CPU_KV=i8;MLXCEL_CPU_ATTN_I8=int,pv")
# Preemption on the int8 cache with its default attention: the resumed sequences recompute their
# tokens through the batched products and must give the uninterrupted decode's tokens (the integer
# modes round the query and the P.V weights, so this needs bit-equal products and attention calls).
add_test(NAME test_engine_preempt_kv_i8 COMMAND test_engine_preempt WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(test_engine_preempt_kv_i8 PROPERTIES ENVIRONMENT "MLXCEL_CPU_KV=i8")
# The avx512vnni kernel set forced (its own integer prefill; the best set on this machine may be amx).
# A CPU without it refuses the value at the backend's start: reported as skipped, with that message.
add_test(NAME test_model_parity_avx512vnni COMMAND test_model_parity WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(test_model_parity_avx512vnni PROPERTIES ENVIRONMENT "MLXCEL_CPU_KERNELS=avx512vnni"
                     SKIP_REGULAR_EXPRESSION "MLXCEL_CPU_KERNELS='avx512vnni': this CPU does not support")
# The avx2 set forced (its integer products and attention, on CPUs whose best set is AVX-512),
# with the I4 cache too (its batched products token by token, bit-equal to the gemv).
add_test(NAME test_model_parity_avx2 COMMAND test_model_parity WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(test_model_parity_avx2 PROPERTIES ENVIRONMENT "MLXCEL_CPU_KERNELS=avx2"
                     SKIP_REGULAR_EXPRESSION "MLXCEL_CPU_KERNELS='avx2': this CPU does not support")
add_test(NAME test_engine_preempt_kv_i4_avx2 COMMAND test_engine_preempt WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(test_engine_preempt_kv_i4_avx2 PROPERTIES ENVIRONMENT "MLXCEL_CPU_KV=i4;MLXCEL_CPU_KERNELS=avx2"
                     SKIP_REGULAR_EXPRESSION "MLXCEL_CPU_KERNELS='avx2': this CPU does not support")
# An MLXCEL_CPU_KERNELS name that is not a kernel set stops the CPU backend's start with an error
# naming it and the sets this CPU supports (a set this CPU lacks likewise: test_cli.py, which picks one).
add_test(NAME cpu_knob_refused_kernels
         COMMAND ${CMAKE_COMMAND} -E env MLXCEL_CPU_KERNELS=avx9
                 $<TARGET_FILE:mlxcel> generate -m models/qwen3-demo-44m-4bit -p Hi -n 1 --backend cpu
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(cpu_knob_refused_kernels PROPERTIES PASS_REGULAR_EXPRESSION
                     "MLXCEL_CPU_KERNELS='avx9': not a kernel set \\(amx, avx512vnni, avx512, avx2 or scalar\\); this CPU supports [a-z0-9, ]*scalar")
# The weights left in the file mapping (the default copies them onto huge pages): same results.
add_test(NAME test_model_parity_weights_mapped COMMAND test_model_parity WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(test_model_parity_weights_mapped PROPERTIES ENVIRONMENT "MLXCEL_CPU_WEIGHTS=mapped")
# python3 runs the CLI, convert, hub, grammar and server suites: one lookup for all of them, and a
# machine without it fails here.
find_program(MLXCEL_PYTHON3 python3 REQUIRED)
file(GLOB MLXCEL_TEST_SCRIPTS CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/tests/cmake/*.cmake)
foreach(script ${MLXCEL_TEST_SCRIPTS})
  include(${script})
endforeach()
# ctest starts the tests of the highest COST first. A clean checkout has no timings of its own, so the
# long ones are named here (rough seconds on a two-core machine): started first, they do not end up
# running alone at the end of a parallel run.
foreach(entry perplexity_demo:130 test_engine_plans:300 gpu_mma_emulation:120
              test_fault_injection:120 gpu_wgmma_mutants:75 grammar_schema_suite:50 test_engine_padding:50
              server_engine:60 test_grammar:40 cli:40 test_engine_preempt:30)
  string(REPLACE ":" ";" entry ${entry})
  list(GET entry 0 name)
  list(GET entry 1 cost)
  if(TEST ${name})
    set_tests_properties(${name} PROPERTIES COST ${cost})
  endif()
endforeach()
