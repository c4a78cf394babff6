# SPDX-License-Identifier: MIT
# Server tests against a live mlxcel-server on an ephemeral port (the unit tests of the output
# parser and request validation are tests/unit/test_server_output.c):
#   server_curl    curl + python3: routes, bad requests, streaming, stops, seeds, disconnects, 503;
#   server_openai  the official `openai` npm package (installed by server_npm_install into
#                  tests/server/node_modules): chat/completions, streaming, errors, and 16
#                  concurrent clients whose temperature-0 answers must equal the answers alone.
find_program(MLXCEL_CURL curl)
find_program(MLXCEL_BASH bash)
find_program(MLXCEL_PY3 python3)
if(MLXCEL_CURL AND MLXCEL_BASH AND MLXCEL_PY3)
  add_test(NAME server_curl COMMAND ${MLXCEL_BASH} ${PROJECT_SOURCE_DIR}/tests/server/curl_suite.sh
           $<TARGET_FILE:mlxcel-server> WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(server_curl PROPERTIES TIMEOUT 150)
else()
  message(STATUS "server_curl test skipped: needs curl, bash and python3")
endif()
find_program(MLXCEL_NODE node)
find_program(MLXCEL_NPM npm)
if(MLXCEL_NODE AND MLXCEL_NPM)
  add_test(NAME server_npm_install
           COMMAND ${MLXCEL_NPM} install --no-audit --no-fund --loglevel=error
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}/tests/server)
  set_tests_properties(server_npm_install PROPERTIES FIXTURES_SETUP server_node TIMEOUT 300)
  add_test(NAME server_openai COMMAND ${MLXCEL_NODE} ${PROJECT_SOURCE_DIR}/tests/server/openai_suite.mjs
           $<TARGET_FILE:mlxcel-server> WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(server_openai PROPERTIES FIXTURES_REQUIRED server_node TIMEOUT 150)
else()
  message(STATUS "server_openai test skipped: needs node and npm")
endif()
