# SPDX-License-Identifier: MIT
# End-to-end CLI tests (tests/cli/test_cli.py) against the built mlxcel program.
add_test(NAME cli COMMAND ${MLXCEL_PYTHON3} ${PROJECT_SOURCE_DIR}/tests/cli/test_cli.py $<TARGET_FILE:mlxcel>
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
add_test(NAME chat COMMAND ${MLXCEL_PYTHON3} ${PROJECT_SOURCE_DIR}/tests/cli/test_chat.py $<TARGET_FILE:mlxcel>
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
