// SPDX-License-Identifier: MIT
// Parsing the JSON files of a model folder (config.json, generation_config.json,
// tokenizer_config.json, chat_template.json). Published files carry integers larger than 64 bits
// in fields mlxcel never reads (Llama 3's `"model_max_length": 1000000000000000019884624838656`);
// jansson rejects those ("too big integer"), so such literals are read as reals instead. A field
// that mlxcel does use is then checked by its reader, whose error names the field.
#ifndef MX_IO_JSON_TEXT_H
#define MX_IO_JSON_TEXT_H

#include <jansson.h>
#include <stddef.h>

// json_loadb with `flags`, except that integer literals outside int64 become JSON reals.
// Returns NULL with `je` filled (line, text) on malformed input, like jansson.
json_t *mx_json_loadb(const char *text, size_t n, size_t flags, json_error_t *je);
// The same for a NUL-terminated string.
json_t *mx_json_loads(const char *text, size_t flags, json_error_t *je);

#endif
