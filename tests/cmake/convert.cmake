# SPDX-License-Identifier: MIT
# CLI tests of `mlxcel convert` (the library parts are unit tests: tests/unit/test_convert*.c).
find_program(MLXCEL_PYTHON3 python3)
if(MLXCEL_PYTHON3)
  add_test(NAME cli_convert COMMAND sh ${PROJECT_SOURCE_DIR}/tests/convert/cli_convert.sh $<TARGET_FILE:mlxcel>
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
else()
  message(STATUS "cli_convert test skipped: python3 not found")
endif()
