# SPDX-License-Identifier: MIT
# CLI tests of `mlxcel convert` (the library parts are unit tests: tests/unit/test_convert*.c).
add_test(NAME cli_convert COMMAND sh ${PROJECT_SOURCE_DIR}/tests/convert/cli_convert.sh $<TARGET_FILE:mlxcel>
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
