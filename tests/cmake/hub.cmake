# SPDX-License-Identifier: MIT
# Hugging Face Hub download tests (src/hub):
#   hub_units  the pure parts (SHA-256 vectors, names, origins, environment, layout helpers);
#   hub        end-to-end against a local stand-in hub (tests/hub/hub_server.py, loopback only,
#              ephemeral ports, stops by itself): download, layout, resume, checksums, offline,
#              tokens, errors, -m org/name in generate/inspect/convert.
if(NOT MLXCEL_HUB)
  message(STATUS "hub tests skipped: configured with MLXCEL_HUB=OFF (no libcurl)")
  return()
endif()
add_executable(test_hub_units ${PROJECT_SOURCE_DIR}/tests/hub/test_hub_units.c)
target_link_libraries(test_hub_units PRIVATE mlxcel_lib)
add_test(NAME hub_units COMMAND test_hub_units WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
add_test(NAME hub COMMAND ${MLXCEL_PYTHON3} ${PROJECT_SOURCE_DIR}/tests/hub/test_hub.py $<TARGET_FILE:mlxcel>
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(hub PROPERTIES TIMEOUT 600)
