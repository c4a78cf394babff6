# SPDX-License-Identifier: MIT
# test_fault_injection (tests/unit/test_fault_injection.c) fails the Nth allocation: its link wraps
# the C allocation functions and open_memstream (GNU ld --wrap), which reaches every call made by the
# static library.
if(TARGET test_fault_injection)
  target_link_options(test_fault_injection PRIVATE
    -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=strdup,--wrap=strndup,--wrap=aligned_alloc,--wrap=posix_memalign,--wrap=open_memstream)
  set_tests_properties(test_fault_injection PROPERTIES TIMEOUT 600)
endif()
