# SPDX-License-Identifier: MIT
# Fuzz targets (fuzz/fuzz_*.c). With MLXCEL_FUZZ (clang; preset "fuzz") each is a libFuzzer
# program, run for a bounded time by scripts/fuzz.sh. In every other build each target is linked
# with fuzz/replay_main.c instead and ctest replays its seed corpus and regression inputs.
file(GLOB MLXCEL_FUZZ_TARGETS CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/fuzz/fuzz_*.c)
if(MLXCEL_FUZZ)
  add_custom_target(fuzz_all)
  # The parsers alone (no kernels: the CPU kernels use GCC-only target builtins).
  file(GLOB MLXCEL_FUZZ_LIB_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/io/*.c ${PROJECT_SOURCE_DIR}/src/core/*.c
       ${PROJECT_SOURCE_DIR}/src/tokenizer/*.c ${PROJECT_SOURCE_DIR}/src/chat/*.c ${PROJECT_SOURCE_DIR}/src/sample/*.c
       ${PROJECT_SOURCE_DIR}/src/grammar/*.c
       ${PROJECT_SOURCE_DIR}/src/server/srv_request.c ${PROJECT_SOURCE_DIR}/src/server/srv_output.c
       ${PROJECT_SOURCE_DIR}/src/server/srv_stop_match.c ${PROJECT_SOURCE_DIR}/src/server/srv_json_alloc.c
       ${PROJECT_SOURCE_DIR}/src/server/srv_harmony.c ${PROJECT_SOURCE_DIR}/src/server/srv_buf.c)
  add_library(mlxcel_fuzz_parsers STATIC EXCLUDE_FROM_ALL ${MLXCEL_FUZZ_LIB_SOURCES})
  target_include_directories(mlxcel_fuzz_parsers PUBLIC ${PROJECT_SOURCE_DIR}/src)
  target_compile_definitions(mlxcel_fuzz_parsers PUBLIC _GNU_SOURCE MLXCEL_VERSION="${PROJECT_VERSION}")
  target_link_libraries(mlxcel_fuzz_parsers PUBLIC PkgConfig::JANSSON PkgConfig::PCRE2 PkgConfig::UTF8PROC
                        Threads::Threads m)
endif()
foreach(src ${MLXCEL_FUZZ_TARGETS})
  get_filename_component(name ${src} NAME_WE)
  string(REGEX REPLACE "^fuzz_" "" corpus ${name})
  if(MLXCEL_FUZZ)
    add_executable(${name} EXCLUDE_FROM_ALL ${src})
    target_link_libraries(${name} PRIVATE mlxcel_fuzz_parsers)
    target_link_options(${name} PRIVATE -fsanitize=fuzzer)
    add_dependencies(fuzz_all ${name})
  else()
    add_executable(replay_${name} ${src} ${PROJECT_SOURCE_DIR}/fuzz/replay_main.c)
    target_link_libraries(replay_${name} PRIVATE mlxcel_lib)
    add_test(NAME replay_${name}
             COMMAND replay_${name} fuzz/corpus/${corpus} fuzz/regressions/${corpus}
             WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  endif()
endforeach()
