# SPDX-License-Identifier: MIT
# GPU build-contract and GPU op tests (included by tests/tests.cmake).
# Every build: the architecture parsers on recorded tool outputs, the configure-time refusals and
# detections (each configures the project in a scratch folder), the SPDX header check, and
# bench_gpu_decode's op records against the engine's (CPU backend).
# GPU builds also: RUNPATH of both programs, and the op-by-op comparison with reference results
# (skipped, exit 77, when the machine has no GPU).
add_test(NAME gpu_arch_parse
         COMMAND ${CMAKE_COMMAND} -DSRC=${PROJECT_SOURCE_DIR} -P ${PROJECT_SOURCE_DIR}/tests/gpu/test_arch_parse.cmake)
add_test(NAME spdx_headers COMMAND ${PROJECT_SOURCE_DIR}/scripts/check_spdx.sh WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
# bench_gpu_decode's records (tests/gpu/bench_decode_model.c) against the engine's, record by record,
# for a small random Qwen3 MoE and dense model (app/bench_model.c writes them, reporting through
# app/cli.c's cli_error; the CPU backend runs).
add_executable(test_bench_records ${PROJECT_SOURCE_DIR}/tests/gpu/test_bench_records.c
                                  ${PROJECT_SOURCE_DIR}/tests/gpu/bench_decode_model.c ${PROJECT_SOURCE_DIR}/app/bench_model.c
                                  ${PROJECT_SOURCE_DIR}/app/cli.c)
target_include_directories(test_bench_records PRIVATE ${PROJECT_SOURCE_DIR}/app)
target_link_libraries(test_bench_records PRIVATE mlxcel_lib)
add_test(NAME bench_records COMMAND test_bench_records ${PROJECT_BINARY_DIR}/bench_records)

# name | expected output regex | extra configure arguments, separated by "|" (a ";" would split
# the test command) | recorded tool output (optional)
set(_gpu_cfg_dir ${PROJECT_BINARY_DIR}/gpu_configure_tests)
set(_fake ${PROJECT_SOURCE_DIR}/tests/gpu/fake_tool.sh)
set(_samples ${PROJECT_SOURCE_DIR}/tests/gpu/samples)
function(mlxcel_gpu_configure_test name regex args fake)
  set(cmd ${CMAKE_COMMAND} -DSRC=${PROJECT_SOURCE_DIR} -DDIR=${_gpu_cfg_dir}/${name} "-DEXPECT=${regex}" "-DARGS=${args}")
  if(fake)
    list(APPEND cmd -DFAKE=${fake})
  endif()
  add_test(NAME gpu_configure_${name} COMMAND ${cmd} -P ${PROJECT_SOURCE_DIR}/tests/gpu/configure_case.cmake)
  set_tests_properties(gpu_configure_${name} PROPERTIES LABELS gpu_contract RESOURCE_LOCK gpu_configure)
endfunction()
mlxcel_gpu_configure_test(both_backends "MLXCEL_CUDA and MLXCEL_ROCM are both ON: choose one GPU backend"
                          "-DMLXCEL_CUDA=ON|-DMLXCEL_ROCM=ON" "")
mlxcel_gpu_configure_test(rocm_no_arch "cannot tell which AMD GPU architectures.*MLXCEL_ROCM_ARCHITECTURES"
                          "-DMLXCEL_ROCM=ON|-DMLXCEL_ROCMINFO=${_fake}" "${_samples}/rocminfo_cpu_only.txt")
mlxcel_gpu_configure_test(rocm_from_rocminfo "ROCm architectures gfx1100.gfx1030 \\(from rocminfo\\)"
                          "-DMLXCEL_ROCM=ON|-DMLXCEL_ROCMINFO=${_fake}" "${_samples}/rocminfo_cpu_first_two_gpus.txt")
mlxcel_gpu_configure_test(rocm_from_mlx_variable "ROCm architectures gfx942 \\(from MLX_ROCM_ARCHITECTURES\\)"
                          "-DMLXCEL_ROCM=ON|-DMLX_ROCM_ARCHITECTURES=gfx942|-DMLXCEL_ROCMINFO=/nonexistent" "")
mlxcel_gpu_configure_test(rocm_bad_arch "bad ROCm architecture list 'mi300'"
                          "-DMLXCEL_ROCM=ON|-DMLXCEL_ROCM_ARCHITECTURES=mi300" "")
mlxcel_gpu_configure_test(cuda_no_arch "cannot tell which NVIDIA GPU architectures.*MLXCEL_CUDA_ARCHITECTURES"
                          "-DMLXCEL_CUDA=ON|-DMLXCEL_NVIDIA_SMI=${_fake}" "${_samples}/nvidia_smi_no_device.txt")
mlxcel_gpu_configure_test(cuda_from_nvidia_smi "CUDA architectures 80.86.89 \\(from nvidia-smi\\)"
                          "-DMLXCEL_CUDA=ON|-DMLXCEL_NVIDIA_SMI=${_fake}" "${_samples}/nvidia_smi_multi.txt")

if(MLXCEL_CUDA OR MLXCEL_ROCM)
  # Both programs carry the runtime's folder in RUNPATH and start with LD_LIBRARY_PATH unset.
  add_test(NAME gpu_runpath
           COMMAND ${PROJECT_SOURCE_DIR}/tests/gpu/check_runpath.sh "${MLXCEL_GPU_RUNTIME_LIBDIR}"
                   $<TARGET_FILE:mlxcel> $<TARGET_FILE:mlxcel-server>)

  add_executable(test_gpu_ops ${PROJECT_SOURCE_DIR}/tests/gpu/test_gpu_ops.c ${PROJECT_SOURCE_DIR}/tests/gpu/gpu_ref.c)
  target_link_libraries(test_gpu_ops PRIVATE mlxcel_lib)
  add_test(NAME gpu_ops COMMAND test_gpu_ops WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(gpu_ops PROPERTIES SKIP_RETURN_CODE 77 LABELS gpu)

  # Every fused pattern of the GPU plan runner (and a whole layer) against the CPU backend, by
  # default (decode batches of 4-64 tokens on the tensor-core decode product, vendor/cuda/matvec_mma.cu,
  # where it applies: affine 4/8-bit), with that product from 2 tokens, and with it off (the float32
  # matrix-vector kernels for every batch): all held to the float32 paths' bounds.
  add_executable(test_gpu_conformance ${PROJECT_SOURCE_DIR}/tests/gpu/test_gpu_conformance.c ${PROJECT_SOURCE_DIR}/tests/gpu/gpu_ref.c)
  target_link_libraries(test_gpu_conformance PRIVATE mlxcel_lib)
  # mlxcel_gpu_conformance(NAME [SETTING]): the harness with one more setting.
  function(mlxcel_gpu_conformance name)
    add_test(NAME ${name} COMMAND test_gpu_conformance WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
    set_tests_properties(${name} PROPERTIES SKIP_RETURN_CODE 77 LABELS gpu ENVIRONMENT "${ARGN}")
  endfunction()
  mlxcel_gpu_conformance(gpu_conformance)
  mlxcel_gpu_conformance(gpu_conformance_tc_decode MLXCEL_GPU_TC_DECODE=2)
  mlxcel_gpu_conformance(gpu_conformance_tc_off MLXCEL_GPU_TC_DECODE=0)
  # The grouped tensor-core products (q/k/v, gate/up + SwiGLU of 4-64 tokens in one launch) are the
  # default, so the cases above run them; their A/B form (MLXCEL_GPU_GROUPED=0: a launch pair per
  # product) under every case of the harness, from 4 tokens and from 2.
  mlxcel_gpu_conformance(gpu_conformance_ungrouped MLXCEL_GPU_GROUPED=0)
  mlxcel_gpu_conformance(gpu_conformance_ungrouped_tc2 MLXCEL_GPU_GROUPED=0 MLXCEL_GPU_TC_DECODE=2)
  # The streaming kernel's previous one-token form (the lean one, kernels/matvec_stream_lean.cuh, is the default) under every case.
  mlxcel_gpu_conformance(gpu_conformance_stream_lean_off MLXCEL_GPU_STREAM_LEAN=0)
  # The residual epilogue with its reads ahead (kernels/matvec_res_early.cuh: the one-token o/down +
  # residual products, streaming and fused kernel) is the default, so the cases above run it; with
  # four rows a task forced (the default takes two where they fit one wave), and its A/B form (the
  # epilogue after the warp sums, MLXCEL_GPU_STREAM_RES_EARLY=0) under every case.
  mlxcel_gpu_conformance(gpu_conformance_stream_rows4 MLXCEL_GPU_STREAM_ROWS=4)
  mlxcel_gpu_conformance(gpu_conformance_stream_res_early_off MLXCEL_GPU_STREAM_RES_EARLY=0)
  # The flash-decoding kernel's short form (kernels/attn_decode.cu) is the default; its group form
  # (a block per KV head's query group at every cache size) under every case of the harness.
  mlxcel_gpu_conformance(gpu_conformance_attn_short_off MLXCEL_GPU_ATTN_SHORT=0)
  # One-token decode steps with the q/k norm + RoPE + KV store folded into the decode attention
  # is the default; the two launches (q/k norm + RoPE + store, then the attention) under every case.
  mlxcel_gpu_conformance(gpu_conformance_attn_rope_off MLXCEL_GPU_ATTN_ROPE=0)
  # Programmatic dependent launch's level 3 is the default (the matrix-vector kernels' early release
  # after the grid wait and L2 prefetch, kernels/matvec.cuh, and the decode attention and its
  # combine, the q/k norm + RoPE launch, the token choice and the MoE launches as dependent launches);
  # plain launches under every case (the results must not depend on the overlap).
  mlxcel_gpu_conformance(gpu_conformance_pdl_off MLXCEL_GPU_PDL=0)
  # Level 2 (the default before run 44: the matrix-vector kernels and the small elementwise launches
  # dependent, the attention, q/k, token choice and MoE launches plain), under every case.
  mlxcel_gpu_conformance(gpu_conformance_pdl2 MLXCEL_GPU_PDL=2)
  # The fused MoE decode launches (routing folded in) under every case of the harness.
  mlxcel_gpu_conformance(gpu_conformance_moe_fused MLXCEL_GPU_MOE_FUSED=2)
  # Level 3 (the norm, router product and routing in one launch; the down launch's early reads).
  mlxcel_gpu_conformance(gpu_conformance_moe_fused3 MLXCEL_GPU_MOE_FUSED=3)
  # The down + combine launch's warp-per-row form (0; the full-lane form is the default) under every
  # case of the harness.
  mlxcel_gpu_conformance(gpu_conformance_moe_down_off MLXCEL_GPU_MOE_DOWN=0)
  # The routing launch's one-warp form (MLXCEL_GPU_MOE_ROUTE_RANK=0; the block form by rank is the
  # default; the experts exactly the CPU's) under every case of the harness.
  mlxcel_gpu_conformance(gpu_conformance_moe_route_warp MLXCEL_GPU_MOE_ROUTE_RANK=0)

  # The sample record split over many blocks per row against one block per row and the host rule.
  add_executable(test_gpu_sample ${PROJECT_SOURCE_DIR}/tests/gpu/test_gpu_sample.c)
  target_link_libraries(test_gpu_sample PRIVATE mlxcel_lib)
  add_test(NAME gpu_sample_split COMMAND test_gpu_sample WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(gpu_sample_split PROPERTIES SKIP_RETURN_CODE 77 LABELS gpu)

  # An unknown GPU KV cache type is refused by name, before any device is looked for (so also on
  # machines without a GPU; the message is printed only on that error's path).
  add_test(NAME gpu_kv_type_refused
           COMMAND ${CMAKE_COMMAND} -E env MLXCEL_GPU_KV=f8
                   $<TARGET_FILE:mlxcel> generate -m models/qwen3-demo-44m-4bit -p Hi -n 1 --backend ${MLXCEL_GPU_RUNTIME_NAME}
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(gpu_kv_type_refused PROPERTIES
                       PASS_REGULAR_EXPRESSION "MLXCEL_GPU_KV='f8': the GPU KV cache type must be i16 \\(the default\\) or f16")

  # --kv-bits 8 (the CPU's int8 cache) is refused by the GPU backend before any device is looked for
  # (src/backends/registry.c), naming the backend and the way out.
  add_test(NAME gpu_kv_bits_8_refused
           COMMAND $<TARGET_FILE:mlxcel> generate -m models/qwen3-demo-44m-4bit -p Hi -n 1 --backend ${MLXCEL_GPU_RUNTIME_NAME}
                   --kv-bits 8
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(gpu_kv_bits_8_refused PROPERTIES
                       PASS_REGULAR_EXPRESSION "kv-bits 8: the ${MLXCEL_GPU_RUNTIME_NAME} backend has no 8-bit KV cache \\(only the cpu backend has")
  # --kv-bits 4 (the CPU's 4-bit cache) likewise.
  add_test(NAME gpu_kv_bits_4_refused
           COMMAND $<TARGET_FILE:mlxcel> generate -m models/qwen3-demo-44m-4bit -p Hi -n 1 --backend ${MLXCEL_GPU_RUNTIME_NAME}
                   --kv-bits 4
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(gpu_kv_bits_4_refused PROPERTIES
                       PASS_REGULAR_EXPRESSION "kv-bits 4: the ${MLXCEL_GPU_RUNTIME_NAME} backend has no 4-bit KV cache \\(only the cpu backend has")

  # The numeric MLXCEL_GPU_* knobs are parsed strictly, before any device is looked for: a value that
  # is not a whole number in range is refused naming the variable and the accepted values.
  function(mlxcel_gpu_knob_refused name setting regex)
    add_test(NAME gpu_knob_refused_${name}
             COMMAND ${CMAKE_COMMAND} -E env ${setting}
                     $<TARGET_FILE:mlxcel> generate -m models/qwen3-demo-44m-4bit -p Hi -n 1 --backend ${MLXCEL_GPU_RUNTIME_NAME}
             WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
    set_tests_properties(gpu_knob_refused_${name} PROPERTIES PASS_REGULAR_EXPRESSION "${regex}")
  endfunction()
  mlxcel_gpu_knob_refused(matvec_tokens_word MLXCEL_GPU_MATVEC_TOKENS=abc
                          "MLXCEL_GPU_MATVEC_TOKENS='abc': must be a whole number from 1 to 1048576 \\(unset: 63\\)")
  mlxcel_gpu_knob_refused(matvec_tokens_zero MLXCEL_GPU_MATVEC_TOKENS=0 "MLXCEL_GPU_MATVEC_TOKENS='0': must be a whole number")
  mlxcel_gpu_knob_refused(stream_min_cols_negative MLXCEL_GPU_STREAM_MIN_COLS=-5
                          "MLXCEL_GPU_STREAM_MIN_COLS='-5': must be a whole number from 0 to 1073741824")
  mlxcel_gpu_knob_refused(stream_min_cols_suffix MLXCEL_GPU_STREAM_MIN_COLS=4k "MLXCEL_GPU_STREAM_MIN_COLS='4k': must be")
  mlxcel_gpu_knob_refused(stream_min_rows_negative MLXCEL_GPU_STREAM_MIN_ROWS=-1
                          "MLXCEL_GPU_STREAM_MIN_ROWS='-1': must be a whole number from 0 to 1073741824 \\(unset: 4096\\)")
  mlxcel_gpu_knob_refused(stream_min_rows_word MLXCEL_GPU_STREAM_MIN_ROWS=many "MLXCEL_GPU_STREAM_MIN_ROWS='many': must be")
  mlxcel_gpu_knob_refused(sample_blocks_range MLXCEL_GPU_SAMPLE_BLOCKS=129
                          "MLXCEL_GPU_SAMPLE_BLOCKS='129': must be a whole number from 1 to 128")
  mlxcel_gpu_knob_refused(sample_blocks_space "MLXCEL_GPU_SAMPLE_BLOCKS= 8" "MLXCEL_GPU_SAMPLE_BLOCKS=' 8': must be")
  mlxcel_gpu_knob_refused(tc_decode_range MLXCEL_GPU_TC_DECODE=65
                          "MLXCEL_GPU_TC_DECODE='65': must be a whole number from 0 to 64 \\(unset: 4\\)")
  mlxcel_gpu_knob_refused(tc_decode_word MLXCEL_GPU_TC_DECODE=on "MLXCEL_GPU_TC_DECODE='on': must be")
  mlxcel_gpu_knob_refused(attn_decode_two MLXCEL_GPU_ATTN_DECODE=2
                          "MLXCEL_GPU_ATTN_DECODE='2': must be a whole number from 0 to 1 \\(unset: 1\\)")
  mlxcel_gpu_knob_refused(attn_decode_word MLXCEL_GPU_ATTN_DECODE=off "MLXCEL_GPU_ATTN_DECODE='off': must be")
  mlxcel_gpu_knob_refused(moe_fused_four MLXCEL_GPU_MOE_FUSED=4
                          "MLXCEL_GPU_MOE_FUSED='4': must be a whole number from 0 to 3 \\(unset: 1\\)")
  mlxcel_gpu_knob_refused(moe_fused_word MLXCEL_GPU_MOE_FUSED=fast "MLXCEL_GPU_MOE_FUSED='fast': must be")
  mlxcel_gpu_knob_refused(moe_down_two MLXCEL_GPU_MOE_DOWN=2
                          "MLXCEL_GPU_MOE_DOWN='2': must be a whole number from 0 to 1 \\(unset: 1\\)")
  mlxcel_gpu_knob_refused(moe_down_word MLXCEL_GPU_MOE_DOWN=flat "MLXCEL_GPU_MOE_DOWN='flat': must be")
  mlxcel_gpu_knob_refused(moe_route_rank_two MLXCEL_GPU_MOE_ROUTE_RANK=2
                          "MLXCEL_GPU_MOE_ROUTE_RANK='2': must be a whole number from 0 to 1 \\(unset: 1\\)")
  mlxcel_gpu_knob_refused(attn_mma_two MLXCEL_GPU_ATTN_MMA=2
                          "MLXCEL_GPU_ATTN_MMA='2': must be a whole number from 0 to 1 \\(unset: 1\\)")
  mlxcel_gpu_knob_refused(pdl_four MLXCEL_GPU_PDL=4
                          "MLXCEL_GPU_PDL='4': must be a whole number from 0 to 3 \\(unset: 3\\)")
  mlxcel_gpu_knob_refused(pdl_word MLXCEL_GPU_PDL=early "MLXCEL_GPU_PDL='early': must be")
  mlxcel_gpu_knob_refused(sample_fast_two MLXCEL_GPU_SAMPLE_FAST=2
                          "MLXCEL_GPU_SAMPLE_FAST='2': must be a whole number from 0 to 1 \\(unset: 1\\)")
  mlxcel_gpu_knob_refused(matvec_rows_three MLXCEL_GPU_MATVEC_ROWS=3 "MLXCEL_GPU_MATVEC_ROWS='3': must be 1, 2 or 4")
  mlxcel_gpu_knob_refused(stream_rows_three MLXCEL_GPU_STREAM_ROWS=3
                          "MLXCEL_GPU_STREAM_ROWS='3': must be 2 or 4 \\(unset or 0: chosen per launch\\)")
  mlxcel_gpu_knob_refused(stream_rows_one MLXCEL_GPU_STREAM_ROWS=1
                          "MLXCEL_GPU_STREAM_ROWS='1': must be 2 or 4 \\(unset or 0: chosen per launch\\)")
  mlxcel_gpu_knob_refused(stream_rows_five MLXCEL_GPU_STREAM_ROWS=5 "MLXCEL_GPU_STREAM_ROWS='5': must be a whole number from 0 to 4")
  mlxcel_gpu_knob_refused(prefill_kernel_word MLXCEL_GPU_PREFILL_KERNEL=fast
                          "MLXCEL_GPU_PREFILL_KERNEL='fast': must be wmma, wmma128, pipe or wgmma \\(unset: wgmma, else pipe\\)")
  mlxcel_gpu_knob_refused(grouped_two MLXCEL_GPU_GROUPED=2
                          "MLXCEL_GPU_GROUPED='2': must be a whole number from 0 to 1 \\(unset: 1\\)")
  mlxcel_gpu_knob_refused(grouped_word MLXCEL_GPU_GROUPED=on "MLXCEL_GPU_GROUPED='on': must be")
  mlxcel_gpu_knob_refused(stream_lean_two MLXCEL_GPU_STREAM_LEAN=2
                          "MLXCEL_GPU_STREAM_LEAN='2': must be a whole number from 0 to 1 \\(unset: 1\\)")
  mlxcel_gpu_knob_refused(stream_lean_word MLXCEL_GPU_STREAM_LEAN=on "MLXCEL_GPU_STREAM_LEAN='on': must be")
  mlxcel_gpu_knob_refused(stream_res_early_two MLXCEL_GPU_STREAM_RES_EARLY=2
                          "MLXCEL_GPU_STREAM_RES_EARLY='2': must be a whole number from 0 to 1 \\(unset: 1\\)")
  mlxcel_gpu_knob_refused(stream_res_early_word MLXCEL_GPU_STREAM_RES_EARLY=on "MLXCEL_GPU_STREAM_RES_EARLY='on': must be")
  mlxcel_gpu_knob_refused(attn_short_two MLXCEL_GPU_ATTN_SHORT=2
                          "MLXCEL_GPU_ATTN_SHORT='2': must be a whole number from 0 to 1 \\(unset: 1\\)")
  mlxcel_gpu_knob_refused(attn_short_word MLXCEL_GPU_ATTN_SHORT=yes "MLXCEL_GPU_ATTN_SHORT='yes': must be")
  mlxcel_gpu_knob_refused(attn_rope_two MLXCEL_GPU_ATTN_ROPE=2
                          "MLXCEL_GPU_ATTN_ROPE='2': must be a whole number from 0 to 1 \\(unset: 1\\)")
  mlxcel_gpu_knob_refused(attn_rope_word MLXCEL_GPU_ATTN_ROPE=on "MLXCEL_GPU_ATTN_ROPE='on': must be")
  mlxcel_gpu_knob_refused(stream_rows_huge MLXCEL_GPU_STREAM_ROWS=99999999999999999999 "MLXCEL_GPU_STREAM_ROWS='99999999999999999999': must be")

  # The model fixtures through the GPU backend (the parity test reads MLXCEL_TEST_BACKEND).
  if(TARGET test_model_parity)
    # mlxcel_gpu_parity(NAME [SETTING]): the fixtures through the GPU backend with one more setting.
    function(mlxcel_gpu_parity name)
      add_test(NAME ${name}
               COMMAND ${PROJECT_SOURCE_DIR}/tests/gpu/if_gpu.sh $<TARGET_FILE:mlxcel> $<TARGET_FILE:test_model_parity>
               WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
      set(env "MLXCEL_TEST_BACKEND=${MLXCEL_GPU_RUNTIME_NAME}" ${ARGN})
      set_tests_properties(${name} PROPERTIES SKIP_RETURN_CODE 77 LABELS gpu ENVIRONMENT "${env}")
    endfunction()
    mlxcel_gpu_parity(gpu_model_parity)
    # Prompts of 2-64 tokens (prefill through the decode-batch products) on the tensor-core decode
    # product from 2 tokens (the default takes it from 4): the fixtures' bounds unchanged.
    mlxcel_gpu_parity(gpu_model_parity_tc_decode MLXCEL_GPU_TC_DECODE=2)
    # ... and with it off: prompts of 2-63 tokens on the float32 matrix-vector kernels.
    mlxcel_gpu_parity(gpu_model_parity_tc_off MLXCEL_GPU_TC_DECODE=0)
    # ... and with the products ungrouped (MLXCEL_GPU_GROUPED=0, the A/B form; from 2 tokens).
    mlxcel_gpu_parity(gpu_model_parity_ungrouped MLXCEL_GPU_GROUPED=0 MLXCEL_GPU_TC_DECODE=2)
    # The residual epilogue after the warp sums (MLXCEL_GPU_STREAM_RES_EARLY=0; the reads ahead are
    # the default) through the fixtures (rows below 4096 columns: the fused kernel's residual products).
    mlxcel_gpu_parity(gpu_model_parity_stream_res_early_off MLXCEL_GPU_STREAM_RES_EARLY=0)
    # Every one-token product of the fixtures on the streaming kernel by the launch-rows rule
    # (MLXCEL_GPU_STREAM_MIN_ROWS=0: their rows are short and few, so by default only the
    # conformance harness's MLXCEL_GPU_STREAM_MIN_COLS=0 takes them there), the residual reads ahead
    # with it and without.
    mlxcel_gpu_parity(gpu_model_parity_stream_min_rows0 MLXCEL_GPU_STREAM_MIN_ROWS=0)
    mlxcel_gpu_parity(gpu_model_parity_stream_min_rows0_res_off MLXCEL_GPU_STREAM_MIN_ROWS=0 MLXCEL_GPU_STREAM_RES_EARLY=0)
    # Plain launches (MLXCEL_GPU_PDL=0; level 3 is the default) through the fixtures.
    mlxcel_gpu_parity(gpu_model_parity_pdl_off MLXCEL_GPU_PDL=0)
    # ... and level 2 (the former default: the attention and q/k norm + RoPE launches plain).
    mlxcel_gpu_parity(gpu_model_parity_pdl2 MLXCEL_GPU_PDL=2)
    # The MoE routing launch's one-warp form (MLXCEL_GPU_MOE_ROUTE_RANK=0; by rank is the default)
    # through the qwen3_moe fixtures.
    mlxcel_gpu_parity(gpu_model_parity_moe_route_warp MLXCEL_GPU_MOE_ROUTE_RANK=0)
  endif()

  add_executable(bench_gpu_decode ${PROJECT_SOURCE_DIR}/tests/gpu/bench_gpu_decode.c
                                  ${PROJECT_SOURCE_DIR}/tests/gpu/bench_decode_model.c)
  target_link_libraries(bench_gpu_decode PRIVATE mlxcel_lib)
  add_executable(bench_gpu_matvec ${PROJECT_SOURCE_DIR}/tests/gpu/bench_gpu_matvec.c)
  target_link_libraries(bench_gpu_matvec PRIVATE mlxcel_lib)
endif()
