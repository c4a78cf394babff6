# SPDX-License-Identifier: MIT
# CLI tests of `mlxcel convert` (the library parts are unit tests: tests/unit/test_convert*.c).
# python3 is required (the CLI tests need it too): a machine without it fails here.
find_program(MLXCEL_PYTHON3 python3 REQUIRED)
add_test(NAME cli_convert COMMAND sh ${PROJECT_SOURCE_DIR}/tests/convert/cli_convert.sh $<TARGET_FILE:mlxcel>
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
