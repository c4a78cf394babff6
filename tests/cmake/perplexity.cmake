# SPDX-License-Identifier: MIT
# Whole-corpus perplexity of the demo model against its reference (labelled slow: it scores 65k
# tokens, so the sanitizer run skips it).
add_test(NAME perplexity_demo COMMAND ${MLXCEL_PYTHON3} ${PROJECT_SOURCE_DIR}/tests/cli/test_perplexity.py
         $<TARGET_FILE:mlxcel> WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(perplexity_demo PROPERTIES LABELS slow TIMEOUT 2400)
