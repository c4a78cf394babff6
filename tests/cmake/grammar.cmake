# SPDX-License-Identifier: MIT
# Constrained decoding and the request features around it (the grammar unit tests are
# tests/unit/test_grammar.c):
#   grammar_schema_suite  python3: 40+ JSON schemas and GBNF grammars over several seeds with the
#                         demo model; every answer that stops validates (own validator);
#   server_openai_api     the `openai` npm package: response_format, tools with tool_choice
#                         required / named, n: 3, logit_bias, unsupported fields;
#   server_mistral_calls  the same client against a Mistral-style tokenizer and template: forced
#                         calls in both [TOOL_CALLS] forms, streamed, special markers kept in text.
add_test(NAME grammar_schema_suite COMMAND ${MLXCEL_PYTHON3} ${PROJECT_SOURCE_DIR}/tests/grammar/schema_suite.py
         $<TARGET_FILE:mlxcel-server> WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(grammar_schema_suite PROPERTIES TIMEOUT 900)
find_program(MLXCEL_NODE node)
find_program(MLXCEL_NPM npm)
if(MLXCEL_NODE AND MLXCEL_NPM)
  add_test(NAME server_openai_api COMMAND ${MLXCEL_NODE} ${PROJECT_SOURCE_DIR}/tests/server/openai_api_suite.mjs
           $<TARGET_FILE:mlxcel-server> WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(server_openai_api PROPERTIES FIXTURES_REQUIRED server_node TIMEOUT 300)
  add_test(NAME server_mistral_calls COMMAND ${MLXCEL_NODE} ${PROJECT_SOURCE_DIR}/tests/server/mistral_calls_suite.mjs
           $<TARGET_FILE:mlxcel-server> WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(server_mistral_calls PROPERTIES FIXTURES_REQUIRED server_node TIMEOUT 300)
endif()
