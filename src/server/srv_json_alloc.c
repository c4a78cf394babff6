// SPDX-License-Identifier: MIT
// The count of jansson's failed allocations per thread (see srv_json_alloc.h).
#include "server/srv_json_alloc.h"

#include <jansson.h>
#include <pthread.h>

static json_malloc_t next_malloc;
static _Thread_local unsigned long failures;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void *counted_malloc(size_t n) {
    void *p = next_malloc(n);
    if (!p) failures++;
    return p;
}

static void install(void) {
    json_free_t next_free;
    json_get_alloc_funcs(&next_malloc, &next_free);
    json_set_alloc_funcs(counted_malloc, next_free);
}

void srv_json_alloc_install(void) { pthread_once(&once, install); }

unsigned long srv_json_alloc_failures(void) { return failures; }
