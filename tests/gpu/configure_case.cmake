# SPDX-License-Identifier: MIT
# Configures the project in a scratch folder with the given cache arguments and checks that the
# output matches a regular expression (the configure may fail: refusals are what some cases test).
# Usage: cmake -DSRC=<repo> -DDIR=<scratch> -DARGS="a|b" -DEXPECT=<regex> [-DFAKE=<sample>] -P ...
cmake_minimum_required(VERSION 3.21)
string(REPLACE "|" ";" ARGS "${ARGS}")
file(REMOVE_RECURSE ${DIR})
if(DEFINED FAKE)
  set(ENV{MLXCEL_FAKE_TOOL_OUTPUT} ${FAKE})
endif()
unset(ENV{MLXCEL_CUDA_ARCHITECTURES})
unset(ENV{MLXCEL_ROCM_ARCHITECTURES})
unset(ENV{MLX_ROCM_ARCHITECTURES})
execute_process(COMMAND ${CMAKE_COMMAND} -S ${SRC} -B ${DIR} ${ARGS}
                OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
cmake_minimum_required(VERSION 3.21)
file(REMOVE_RECURSE ${DIR})
string(REGEX REPLACE "[ \t\r\n]+" " " all "${out} ${err}")
if(NOT all MATCHES "${EXPECT}")
  message(FATAL_ERROR "configure output (rc ${rc}) does not match '${EXPECT}':\n${out}\n${err}")
endif()
message(STATUS "ok (rc ${rc}): matched '${EXPECT}'")
