# SPDX-License-Identifier: MIT
# Server tests against a live mlxcel-server on an ephemeral port (the unit tests of the output
# parser and request validation are tests/unit/test_server_output.c):
#   server_curl    curl + python3: routes, bad requests, streaming, stops, seeds, disconnects, 503;
#   server_engine  tests/server/engine_suite.py: CLI == server for one seed, prefix reuse, waiting, cancellation,
#                  preemption in a small KV pool;
#   server_openai  the official `openai` npm package (installed by server_npm_install into
#                  tests/server/node_modules): chat/completions, streaming, errors, and 16
#                  concurrent clients whose temperature-0 answers must equal the answers alone.
#
# The tools are required: a machine without them fails here instead of running a smaller suite
# (scripts/setup.sh installs them). -DMLXCEL_SERVER_TESTS=OFF leaves both tests out on purpose (the
# GPU device scripts do, as they run only the GPU group).
option(MLXCEL_SERVER_TESTS "Register the live-server tests (need curl, bash, python3, node, npm)" ON)
if(MLXCEL_SERVER_TESTS)
  foreach(tool curl bash node npm)  # python3: tests/tests.cmake
    string(TOUPPER ${tool} _var)
    find_program(MLXCEL_TOOL_${_var} ${tool})
    if(NOT MLXCEL_TOOL_${_var})
      message(FATAL_ERROR "the server tests need '${tool}', which is not installed: run scripts/setup.sh, "
                          "or configure with -DMLXCEL_SERVER_TESTS=OFF to leave those tests out")
    endif()
  endforeach()
  add_test(NAME server_curl COMMAND ${MLXCEL_TOOL_BASH} ${PROJECT_SOURCE_DIR}/tests/server/curl_suite.sh
           $<TARGET_FILE:mlxcel-server> WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  # Generous limits: on a loaded 2-core machine the suite takes several times its ~20 s.
  set_tests_properties(server_curl PROPERTIES TIMEOUT 400)
  add_test(NAME server_npm_install
           COMMAND ${MLXCEL_TOOL_NPM} install --no-audit --no-fund --loglevel=error
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}/tests/server)
  set_tests_properties(server_npm_install PROPERTIES FIXTURES_SETUP server_node TIMEOUT 300)
  add_test(NAME server_openai COMMAND ${MLXCEL_TOOL_NODE} ${PROJECT_SOURCE_DIR}/tests/server/openai_suite.mjs
           $<TARGET_FILE:mlxcel-server> WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(server_openai PROPERTIES FIXTURES_REQUIRED server_node TIMEOUT 300)
  # Hardening: connection limits and timeouts, UTF-8-safe replies, half-close, CORS, framing,
  # graceful shutdown, --no-special-in-content, the memory check (tests/server/hardening.py).
  add_test(NAME server_hardening COMMAND ${MLXCEL_PYTHON3} ${PROJECT_SOURCE_DIR}/tests/server/hardening.py
           $<TARGET_FILE:mlxcel-server> WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(server_hardening PROPERTIES TIMEOUT 300)
else()
  message(STATUS "mlxcel: server tests left out (MLXCEL_SERVER_TESTS=OFF)")
endif()
# gpt-oss's harmony format (tests/server/harmony_suite.py): the demo model with a harmony tokenizer
# and gpt-oss's template, its output scripted by grammars; reasoning_content, content, tool calls
# (plain and streamed), JSON answers, reasoning_effort, and `mlxcel generate` against the server.
add_test(NAME server_harmony COMMAND ${MLXCEL_PYTHON3} ${PROJECT_SOURCE_DIR}/tests/server/harmony_suite.py
         $<TARGET_FILE:mlxcel> $<TARGET_FILE:mlxcel-server> WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(server_harmony PROPERTIES TIMEOUT 300)
add_test(NAME server_engine COMMAND ${MLXCEL_PYTHON3} ${PROJECT_SOURCE_DIR}/tests/server/engine_suite.py
         $<TARGET_FILE:mlxcel> $<TARGET_FILE:mlxcel-server> WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(server_engine PROPERTIES TIMEOUT 300)
# The same suite with the opt-in int8 KV cache on every server and CLI run (prefix reuse, copy-on-write,
# preemption and CLI == server on its codes), and its startup line (I8, 1.25 / 2.25 of the pool's MiB):
# with its default attention (integer scores and P.V on the avx512vnni kernels), then the float path.
# Labelled repeat (as the 4-bit one): the sanitizer run leaves them out, since their cache code runs
# under the sanitizers in test_model_parity_kv_* and test_engine_preempt_kv_*, and the server code
# is server_engine's.
add_test(NAME server_engine_kv_i8 COMMAND ${MLXCEL_PYTHON3} ${PROJECT_SOURCE_DIR}/tests/server/engine_suite.py
         $<TARGET_FILE:mlxcel> $<TARGET_FILE:mlxcel-server> --kv-bits 8 WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(server_engine_kv_i8 PROPERTIES TIMEOUT 300 LABELS repeat)
add_test(NAME server_engine_kv_i8_float COMMAND ${MLXCEL_PYTHON3} ${PROJECT_SOURCE_DIR}/tests/server/engine_suite.py
         $<TARGET_FILE:mlxcel> $<TARGET_FILE:mlxcel-server> --kv-bits 8 WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(server_engine_kv_i8_float PROPERTIES TIMEOUT 300 LABELS repeat ENVIRONMENT "MLXCEL_CPU_ATTN_I8=float")
# The same suite with the opt-in 4-bit KV cache (I4, 0.625 / 2.25 of the pool's MiB).
add_test(NAME server_engine_kv_i4 COMMAND ${MLXCEL_PYTHON3} ${PROJECT_SOURCE_DIR}/tests/server/engine_suite.py
         $<TARGET_FILE:mlxcel> $<TARGET_FILE:mlxcel-server> --kv-bits 4 WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(server_engine_kv_i4 PROPERTIES TIMEOUT 300 LABELS repeat)
