// SPDX-License-Identifier: MIT
// SHA-256 (FIPS 180-4), incremental. The hub client checks every LFS file it downloads against
// the sha256 the Hub names it by (its ETag); none of the libraries mlxcel links exports one.
#ifndef MX_HUB_SHA256_H
#define MX_HUB_SHA256_H

#include <stddef.h>
#include <stdint.h>

typedef struct mx_sha256 {
    uint32_t state[8];
    uint64_t length;       // bytes hashed so far
    uint8_t block[64];     // pending partial block
    size_t block_used;
} mx_sha256;

void mx_sha256_init(mx_sha256 *h);
void mx_sha256_update(mx_sha256 *h, const void *data, size_t n);
// Finishes the hash and writes 64 lowercase hex digits and a NUL into hex (65 bytes).
void mx_sha256_hex(mx_sha256 *h, char hex[65]);

#endif
